"""The chaos run behind scripts/chaos: see that script for what it checks."""
import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "debug")
ADMIN = os.environ.get("SLIPWAY_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432/postgres")
DB_NAME = "slipway_chaos"


def log(msg):
    print(f"chaos: {msg}", flush=True)


def psql(sql):
    subprocess.run(["psql", ADMIN, "-q", "-v", "ON_ERROR_STOP=1", "-c", sql], check=True, capture_output=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def slow_source(root, deploy_seconds):
    """A module source whose deploy takes a few seconds and reports one node."""
    effects = os.path.join(root, "core", "effects")
    os.makedirs(effects)
    with open(os.path.join(root, "core", "default.nix"), "w") as f:
        f.write("{ provider ? {} }: { }\n")
    deploy = f"""#!/bin/sh
echo "deploy $BUILD_ID starting"
sleep {deploy_seconds}
echo '{{"nodes": [{{"name": "web", "dnsNames": [], "outcome": "deployed", "system": null, "error": null}}]}}' > "$SBOM_OUT_DIR/nodes.json"
echo '{{"bomFormat": "CycloneDX", "specVersion": "1.5", "components": []}}' > "$SBOM_OUT_DIR/web.cdx.json"
echo "deploy $BUILD_ID done"
"""
    for name, body in (("deploy", deploy), ("destroy", "#!/bin/sh\nsleep 1\n")):
        path = os.path.join(effects, name)
        with open(path, "w") as f:
            f.write(body)
        os.chmod(path, 0o755)


class Api:
    def __init__(self, base, token):
        self.base, self.token = base, token

    def call(self, method, path, body=None, timeout=10):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")
        except (urllib.error.URLError, ConnectionError, TimeoutError, socket.timeout) as e:
            return None, str(e)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--deployments", type=int, default=50)
    p.add_argument("--kills", type=int, default=10)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--deploy-seconds", type=int, default=3)
    p.add_argument("--deadline", type=int, default=900, help="seconds for everything to finish")
    args = p.parse_args()
    rng = random.Random(int(os.environ.get("CHAOS_SEED", time.time())))

    work = tempfile.mkdtemp(prefix="slipway-chaos-")
    slow_source(os.path.join(work, "source"), args.deploy_seconds)
    psql(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
    psql(f"CREATE DATABASE {DB_NAME}")
    port = free_port()
    env = dict(os.environ)
    env.update({
        "DATABASE_URL": ADMIN.rsplit("/", 1)[0] + "/" + DB_NAME,
        "SLIPWAY_STATE_DIR": os.path.join(work, "state"),
        "SLIPWAY_BIND": f"127.0.0.1:{port}",
        "SLIPWAY_JWT_SECRET": "chaos-secret-chaos-secret-chaos-secret",
        "SLIPWAY_DEFAULT_SOURCE_DIR": os.path.join(work, "source"),
        "SLIPWAY_HEARTBEAT": "1",
        "BUILD_SLOTS": "4",
        "QUEUE_SIZE": "10000",
    })
    env.pop("SLIPWAY_CONFIG", None)
    logs = open(os.path.join(work, "processes.log"), "ab")
    procs = {}

    def spawn(name, argv):
        procs[name] = subprocess.Popen(argv, env=env, stdout=logs, stderr=logs)

    spawn("api", [os.path.join(BIN, "slipway-api")])
    for i in range(args.workers):
        spawn(f"worker-{i}", [os.path.join(BIN, "slipway-worker"), "work"])
    token = subprocess.run([os.path.join(BIN, "slipway-api"), "token", "--deployments", "*", "--ttl", "2h"],
                           env=env, check=True, capture_output=True, text=True).stdout.strip()
    api = Api(f"http://127.0.0.1:{port}", token)
    deadline = time.time() + 60
    while api.call("GET", "/healthz")[0] != 200:
        if time.time() > deadline:
            sys.exit("chaos: the api did not come up")
        time.sleep(0.2)
    log(f"api on :{port}, {args.workers} workers, work folder {work}")

    # Every deployment gets a deploy; every fifth a second one right after
    # (ST-2: they run one after the other, in submit order).
    ids = [f"chaos-{i}" for i in range(args.deployments)]
    configuration = json.load(open(os.path.join(ROOT, "examples", "demo.json")))
    accepted = {d: [] for d in ids}
    plan = [(d, n) for i, d in enumerate(ids) for n in range(2 if i % 5 == 0 else 1)]
    kills, pg_restarted, next_chaos = 0, False, time.time() + 1.0

    def chaos_step():
        nonlocal kills, pg_restarted, next_chaos
        if time.time() < next_chaos:
            return
        next_chaos = time.time() + rng.uniform(1.0, 2.5)
        if kills == args.kills // 2 and not pg_restarted:
            log("restarting PostgreSQL")
            version = max(os.listdir("/etc/postgresql"), key=lambda v: [int(x) for x in v.split(".") if x.isdigit()])
            subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"], check=True)
            pg_restarted = True
            return
        if kills < args.kills:
            name = rng.choice([n for n in procs if n.startswith("worker-")])
            procs[name].send_signal(signal.SIGKILL)
            procs[name].wait()
            spawn(name, [os.path.join(BIN, "slipway-worker"), "work"])
            kills += 1
            log(f"SIGKILLed and restarted {name} ({kills}/{args.kills})")

    for d, _ in plan:
        while True:
            status, body = api.call("PUT", f"/deployments/{d}", {"configuration": configuration})
            if status == 202:
                accepted[d].append(body["build_id"])
                break
            # Refused or the connection failed (PostgreSQL restarting): not
            # accepted, so submit again.
            time.sleep(0.2)
        chaos_step()
    log(f"{len(plan)} submits accepted for {len(ids)} deployments")

    # Keep the chaos going while the builds run, then wait for the end.
    end = time.time() + args.deadline
    while time.time() < end:
        chaos_step()
        if kills >= args.kills and pg_restarted:
            status, body = api.call("GET", "/deployments?ids=" + ",".join(ids))
            if status == 200 and all(x["state"] in ("active", "failed") for x in body["deployments"]):
                break
        time.sleep(0.5)

    passed, failed = 0, 0
    for d in ids:
        status, body = api.call("GET", f"/deployments/{d}/builds")
        problems = []
        if status != 200:
            problems.append(f"GET builds answered {status}")
            builds = []
        else:
            builds = list(reversed(body["builds"]))  # submit order
        known = [b["id"] for b in builds]
        for b in accepted[d]:
            if b not in known:
                problems.append(f"accepted build {b} is missing")
        for b in builds:
            if b["status"] != "succeeded":
                problems.append(f"build {b['id']} ended {b['status']} ({b.get('reason')}: {b.get('error')})")
        for a, b in zip(builds, builds[1:]):
            if a.get("finished_at") and b.get("started_at") and b["started_at"] < a["finished_at"]:
                problems.append(f"build {b['id']} started before {a['id']} finished")
        status, dep = api.call("GET", f"/deployments/{d}")
        if status != 200 or dep["state"] != "active":
            problems.append(f"state is {dep['state'] if status == 200 else status}, expected active")
        if problems:
            failed += 1
            log(f"{d}: " + "; ".join(problems))
        else:
            passed += 1

    attempts = 0
    for d in ids:
        _, body = api.call("GET", f"/deployments/{d}/builds")
        attempts += sum(b["attempts"] - 1 for b in body.get("builds", [])) if isinstance(body, dict) else 0
    log(f"{kills} worker kills, PostgreSQL restarted: {pg_restarted}, builds re-run after a kill: {attempts}")
    for proc in procs.values():
        proc.send_signal(signal.SIGTERM)
    for proc in procs.values():
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
    if failed == 0:
        shutil.rmtree(work, ignore_errors=True)
        psql(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
    else:
        log(f"kept {work} and database {DB_NAME} for inspection")
    print(f"{passed} passed, {failed} failed")
    sys.exit(0 if failed == 0 and kills >= args.kills and pg_restarted else 1)


main()
