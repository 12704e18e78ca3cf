"""The chaos run behind scripts/chaos: see that script for what it checks.

Threads: the main thread runs the chaos (worker kills and the PostgreSQL
restart); a submitter thread sends the submits in waves (a small pool sends
each wave) and SIGKILLs an api while one of its submits is in flight. All
checks run at the end, on what the api, the provider state folders and /proc
say; none of them depends on a sleep.
"""
import argparse
import concurrent.futures
import fcntl
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("SLIPWAY_BIN_DIR") or os.path.join(
    os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "debug")
ADMIN = os.environ.get("SLIPWAY_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432/postgres")
DB_NAME = "slipway_chaos"
BUILD_SLOTS = 4
MARKER = "SLIPWAY_EFFECT"

_print_lock = threading.Lock()
_events = None  # processes.log, where our own events go between the processes' lines


def log(msg):
    with _print_lock:
        print(f"chaos: {msg}", flush=True)
        if _events is not None:
            _events.write(f"chaos {time.strftime('%H:%M:%S')}: {msg}\n".encode())
            _events.flush()


def psql(sql):
    subprocess.run(["psql", ADMIN, "-q", "-v", "ON_ERROR_STOP=1", "-c", sql], check=True, capture_output=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def slow_source(root, deploy_seconds, run_id):
    """A module source whose deploy takes a few seconds and reports one node.

    The deploy holds `$STATE_DIR/effect.lock` (`flock`, on fd 9) for its
    whole run; everything it starts inherits fd 9, so a process left behind
    by a killed worker keeps holding it. A deploy that finds the lock taken
    records itself (and the holder) in `$STATE_DIR/overlaps` and carries on,
    so the build still succeeds and only the overlap is recorded.

    Its time is spent in a real `nix-build` of a derivation of its own (one
    per build attempt, so it is never already built) whose builder waits:
    Nix starts the builder in a session of its own with a clean environment,
    so it outlives a killed worker unless the effect is contained, and then
    it runs on for an hour. The builder's environment carries the run id
    (`chaosRun`), so the stray check finds it.
    """
    effects = os.path.join(root, "core", "effects")
    os.makedirs(effects)
    with open(os.path.join(root, "core", "default.nix"), "w") as f:
        f.write("{ provider ? {} }: { }\n")
    # The builder's work runs in a process of its own for deploy_seconds
    # while the builder lives; once orphaned (its parent changed: the build
    # was killed and nothing contained it) it turns into a runaway that
    # sleeps for an hour, which only containment ends: it is no child of
    # anything that carries the effect's marker.
    builder = os.path.join(effects, "chaos-builder.sh")
    with open(builder, "w") as f:
        f.write(f"""(
  read -r _ _ _ parent _ < /proc/self/stat
  end=$(( $(date +%s) + {deploy_seconds} ))
  while [ "$(date +%s)" -lt "$end" ]; do
    read -r _ _ _ now _ < /proc/self/stat
    [ "$now" = "$parent" ] || exec sleep 3600
    sleep 0.2
  done
  echo done > "$out"
) &
wait
""")
    deploy = f"""#!/bin/sh
exec 9>>"$STATE_DIR/effect.lock"
if flock -n 9; then
  echo "$BUILD_ID pid $$" > "$STATE_DIR/holder"
else
  echo "$BUILD_ID (pid $$) found $STATE_DIR/effect.lock taken; last holder: $(cat "$STATE_DIR/holder" 2>/dev/null)" >> "$STATE_DIR/overlaps"
  echo "deploy $BUILD_ID: another effect of this deployment holds the lock"
fi
echo "deploy $BUILD_ID starting"
cat > "${{TMPDIR:-/tmp}}/chaos.nix" <<NIX
derivation {{
  name = "slipway-chaos";
  system = builtins.currentSystem;
  builder = "/bin/sh";
  args = [ "{builder}" ];
  PATH = "/usr/bin:/bin";
  chaosRun = "{run_id}";
  attempt = "$BUILD_ID.${{SLIPWAY_EFFECT_ATTEMPT:-0}}.$(date +%s%N)";
}}
NIX
nix-build "${{TMPDIR:-/tmp}}/chaos.nix" --no-out-link || exit 1
echo '{{"nodes": [{{"name": "web", "dnsNames": [], "outcome": "deployed", "system": null, "error": null}}]}}' > "$SBOM_OUT_DIR/nodes.json"
echo '{{"bomFormat": "CycloneDX", "specVersion": "1.5", "components": []}}' > "$SBOM_OUT_DIR/web.cdx.json"
echo "deploy $BUILD_ID done"
"""
    for name, body in (("deploy", deploy), ("destroy", "#!/bin/sh\nsleep 1\n")):
        path = os.path.join(effects, name)
        with open(path, "w") as f:
            f.write(body)
        os.chmod(path, 0o755)
    return os.path.join(effects, "deploy")


def start_lock_selftest(deploy, work):
    """Runs the deploy effect once while we hold its lock, so it must record
    an overlap: proves the detection works before trusting its silence.
    Returns a function giving the problem found (or None) once it ended."""
    state = os.path.join(work, "selftest", "state")
    sbom = os.path.join(work, "selftest", "sbom")
    os.makedirs(state)
    os.makedirs(sbom)
    held = open(os.path.join(state, "effect.lock"), "ab")
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    scratch = os.path.join(work, "selftest", "tmp")
    os.makedirs(scratch)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "STATE_DIR": state, "SBOM_OUT_DIR": sbom,
           "BUILD_ID": "selftest", "TMPDIR": scratch, "NIX_CONFIG": os.environ.get("NIX_CONFIG", "")}
    proc = subprocess.Popen([deploy], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def result():
        out = proc.communicate(timeout=120)[0].decode(errors="replace")
        held.close()
        try:
            recorded = open(os.path.join(state, "overlaps")).read()
        except FileNotFoundError:
            recorded = ""
        if proc.returncode != 0:
            return f"the deploy effect exited {proc.returncode} in the lock self-test: {out.strip()}"
        if "selftest" not in recorded:
            return ("the deploy effect did not record an overlap while its lock was held, "
                    f"so overlaps would go unseen (output: {out.strip()!r})")
        return None
    return result


class Api:
    def __init__(self, name, port, token):
        self.name, self.port, self.token = name, port, token
        self.base = f"http://127.0.0.1:{port}"

    def call(self, method, path, body=None, timeout=15):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                return e.code, json.loads(raw or b"null")
            except ValueError:
                return e.code, raw.decode(errors="replace")
        except (OSError, http.client.HTTPException) as e:
            # Refused, reset, timed out, or cut in the middle of the answer
            # (URLError, RemoteDisconnected, IncompleteRead, …).
            return None, f"{type(e).__name__}: {e}"


class Fleet:
    """The api replicas and workers we started, by name."""

    def __init__(self, env, logs, apis):
        self.env, self.logs, self.apis = env, logs, apis
        self.procs = {}
        self.lock = threading.Lock()

    def spawn(self, name):
        if name.startswith("api-"):
            api = self.apis[int(name.split("-")[1])]
            argv = [os.path.join(BIN, "slipway-api")]
            env = dict(self.env, SLIPWAY_BIND=f"127.0.0.1:{api.port}")
        else:
            argv, env = [os.path.join(BIN, "slipway-worker"), "work"], self.env
        with self.lock:
            self.procs[name] = subprocess.Popen(argv, env=env, stdout=self.logs, stderr=self.logs)
            return self.procs[name].pid

    def sigkill(self, name):
        with self.lock:
            proc = self.procs[name]
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        return proc.pid

    def exited(self, name):
        with self.lock:
            return self.procs[name].poll()

    def names(self, prefix):
        with self.lock:
            return sorted(n for n in self.procs if n.startswith(prefix))

    def stop_all(self):
        with self.lock:
            procs = list(self.procs.values())
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def wait_healthy(fleet, api, seconds=60):
    """Polls the api's /healthz; respawns it if it exited (e.g. it started
    while PostgreSQL was restarting). Returns an error text or None."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        if api.call("GET", "/healthz", timeout=2)[0] == 200:
            return None
        if fleet.exited(api.name) is not None:
            log(f"{api.name} exited while starting; starting it again")
            fleet.spawn(api.name)
        time.sleep(0.2)
    return f"{api.name} on :{api.port} did not answer /healthz within {seconds}s"


class Submitter(threading.Thread):
    """Sends every submit of `plan`, wave by wave, round-robin over the apis
    (another api when one cannot be reached). SIGKILLs one api while one of
    its submits is in flight during wave `kill_wave`, and holds the last wave
    until PostgreSQL has been restarted, so the chaos happens while submits
    still arrive."""

    def __init__(self, fleet, apis, waves, configuration, rng, kill_wave, pg_restarted, threads=4):
        super().__init__(daemon=True)
        self.fleet, self.apis, self.waves, self.configuration = fleet, apis, waves, configuration
        self.rng, self.kill_wave, self.pg_restarted = rng, kill_wave, pg_restarted
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=threads)
        self.lock = threading.Lock()
        self.inflight = [0] * len(apis)
        self.next_api = 0
        ids = [d for wave in waves for d, _ in wave]
        self.accepted = {d: [] for d in ids}
        self.transport = {d: [] for d in ids}  # submits whose connection failed: maybe accepted
        self.refused = {d: [] for d in ids}  # 5xx answers: not accepted, submitted again
        self.problems = {d: [] for d in ids}
        self.api_killed = threading.Event()  # set once the api kill is over, done or not
        self.api_kill_note = None  # what was killed, when it was
        self.errors = []

    def submit(self, d):
        with self.lock:
            first = self.next_api
            self.next_api = (self.next_api + 1) % len(self.apis)
        deadline = time.time() + 300
        for attempt in range(10 ** 6):
            i = (first + attempt) % len(self.apis)
            api = self.apis[i]
            with self.lock:
                self.inflight[i] += 1
            try:
                status, body = api.call("PUT", f"/deployments/{d}", {"configuration": self.configuration})
            finally:
                with self.lock:
                    self.inflight[i] -= 1
            if status == 202:
                with self.lock:
                    self.accepted[d].append(body["build_id"])
                return
            if status is None:
                with self.lock:
                    self.transport[d].append(f"{api.name}: {body}")
                if (attempt + 1) % len(self.apis) != 0:
                    continue  # try the next api at once
            elif status >= 500:
                with self.lock:
                    self.refused[d].append(f"{api.name}: {status} {body}")
            else:
                with self.lock:
                    self.problems[d].append(f"a submit was answered {status}: {body}")
                return
            if time.time() > deadline:
                with self.lock:
                    self.problems[d].append("a submit was not accepted within 300s")
                return
            time.sleep(0.2)  # back off before submitting again

    def submit_all(self, d, count):
        for _ in range(count):
            self.submit(d)

    def kill_api_mid_submit(self):
        """Waits for a submit in flight, SIGKILLs that api and restarts it on
        the same port."""
        deadline = time.time() + 60
        target, inflight = None, 0
        while time.time() < deadline:
            with self.lock:
                busy = [(n, i) for i, n in enumerate(self.inflight) if n > 0]
                if busy:
                    inflight, target = busy[0]
                    api = self.apis[target]
                    pid = self.fleet.sigkill(api.name)  # under the lock: no submit starts or ends meanwhile
                    break
            time.sleep(0.002)
        if target is None:
            self.errors.append("no submit was in flight within 60s to kill an api under")
            self.api_killed.set()
            return
        self.api_kill_note = f"{api.name} (pid {pid}, :{api.port}) with {inflight} submit(s) in flight"
        log(f"SIGKILLed {self.api_kill_note}; restarting it on the same port")
        self.fleet.spawn(api.name)
        problem = wait_healthy(self.fleet, api)
        if problem:
            self.errors.append(f"after its SIGKILL, {problem}")
        else:
            log(f"{api.name} is back on :{api.port}")
        self.api_killed.set()

    def run(self):
        killer = None
        for w, wave in enumerate(self.waves):
            if w == len(self.waves) - 1 and w > 0 and not self.pg_restarted.wait(timeout=300):
                self.errors.append("PostgreSQL was not restarted before the last wave of submits")
            futures = [self.pool.submit(self.submit_all, d, n) for d, n in wave]
            if w == self.kill_wave:
                killer = threading.Thread(target=self.kill_api_mid_submit, daemon=True)
                killer.start()
            concurrent.futures.wait(futures)
            for f in futures:
                if f.exception() is not None:
                    self.errors.append(f"a submit raised {f.exception()!r}")
            log(f"wave {w + 1}/{len(self.waves)} submitted ({sum(n for _, n in wave)} submits)")
            if w + 1 < len(self.waves):
                time.sleep(self.rng.uniform(0.3, 1.2))  # pacing between waves, not a check
        if killer is not None:
            killer.join()
        self.pool.shutdown()


def proc_environ(pid):
    try:
        raw = open(f"/proc/{pid}/environ", "rb").read()
    except OSError:
        return None
    env = {}
    for var in raw.split(b"\0"):
        key, sep, value = var.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def proc_stat(pid):
    """(start time in clock ticks since boot, pid namespace) of a process, or None."""
    try:
        stat = open(f"/proc/{pid}/stat").read()
        ns = os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    if fields[0] == "Z":
        return None
    return int(fields[19]), ns


def strays(work, build_ids, run_id, run_started):
    """Every process still running that the run left: one that carries a
    build id of ours, the run id or the work folder in its environment or
    command line (Nix builders carry the run id as a derivation attribute),
    works under the work folder, or lives in a PID namespace other than ours
    and started after the run did (an effect's namespace)."""
    roots = {os.path.realpath(work), work}
    under = lambda p: p and any(p == r or p.startswith(r + os.sep) for r in roots)  # noqa: E731
    mine = proc_stat(os.getpid())
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        stat = proc_stat(entry)
        if stat is None:
            continue
        env = proc_environ(entry) or {}
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd").removesuffix(" (deleted)")
        except OSError:
            cwd = ""
        try:
            cmd = open(f"/proc/{entry}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            cmd = "?"
        texts = list(env.values()) + [cmd]
        ours = (env.get(MARKER) in build_ids or env.get("BUILD_ID") in build_ids or under(cwd)
                or any(run_id in t or work in t for t in texts))
        contained = stat[1] != mine[1] and stat[0] >= run_started
        if ours or contained:
            found.append((int(entry), env.get(MARKER), cmd, cwd))
    return found


def main():
    global _events
    p = argparse.ArgumentParser(description="Chaos run of the Slipway fleet on PostgreSQL (see scripts/chaos).")
    p.add_argument("--deployments", type=int, default=50)
    p.add_argument("--kills", type=int, default=10, help="worker SIGKILLs")
    p.add_argument("--pg-restarts", type=int, default=1, help="PostgreSQL restarts, spread over the kills")
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--apis", type=int, default=2, help="api replicas, each on its own port")
    p.add_argument("--deploy-seconds", type=int, default=3)
    p.add_argument("--deadline", type=int, default=900, help="seconds for everything to finish")
    args = p.parse_args()
    if args.deployments < 2 or args.workers < 1 or args.apis < 1 or args.kills < 0 or args.pg_restarts < 0:
        p.error("need --deployments >= 2, --workers >= 1, --apis >= 1, --kills >= 0, --pg-restarts >= 0")
    for tool in ("flock", "psql", "pg_ctlcluster"):
        if shutil.which(tool) is None:
            sys.exit(f"chaos: `{tool}` is not on PATH (flock comes with util-linux, the others with PostgreSQL)")
    for binary in ("slipway-api", "slipway-worker"):
        if not os.access(os.path.join(BIN, binary), os.X_OK):
            sys.exit(f"chaos: no {binary} in {BIN} (build it, or point SLIPWAY_BIN_DIR at a folder holding it)")
    seed = int(os.environ.get("CHAOS_SEED", time.time()))
    rng = random.Random(seed)

    work = tempfile.mkdtemp(prefix="slipway-chaos-")
    os.chmod(work, 0o755)  # Nix's build users read the builder script under it
    run_id = os.path.basename(work)
    run_started = proc_stat(os.getpid())[0]
    deploy = slow_source(os.path.join(work, "source"), args.deploy_seconds, run_id)
    selftest = start_lock_selftest(deploy, work)
    psql(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
    psql(f"CREATE DATABASE {DB_NAME}")
    env = dict(os.environ)
    env.update({
        "DATABASE_URL": ADMIN.rsplit("/", 1)[0] + "/" + DB_NAME,
        "SLIPWAY_STATE_DIR": os.path.join(work, "state"),
        "SLIPWAY_JWT_SECRET": "chaos-secret-chaos-secret-chaos-secret",
        "SLIPWAY_DEFAULT_SOURCE_DIR": os.path.join(work, "source"),
        "SLIPWAY_HEARTBEAT": "1",
        "BUILD_SLOTS": str(BUILD_SLOTS),
        "QUEUE_SIZE": "10000",
    })
    env.pop("SLIPWAY_CONFIG", None)
    env.pop("SLIPWAY_BIND", None)
    logs = open(os.path.join(work, "processes.log"), "ab")
    _events = logs
    log(f"seed {seed} (CHAOS_SEED), binaries from {BIN}, work folder {work}")

    token = subprocess.run([os.path.join(BIN, "slipway-api"), "token", "--deployments", "*", "--ttl", "2h"],
                           env=env, check=True, capture_output=True, text=True).stdout.strip()
    apis = [Api(f"api-{i}", free_port(), token) for i in range(args.apis)]
    fleet = Fleet(env, logs, apis)
    # The first api runs the migrations; the others start once it is up.
    fleet.spawn("api-0")
    for i, api in enumerate(apis):
        if i > 0:
            fleet.spawn(api.name)
        problem = wait_healthy(fleet, api)
        if problem:
            fleet.stop_all()
            sys.exit(f"chaos: {problem}; see {work}/processes.log")
    for i in range(args.workers):
        fleet.spawn(f"worker-{i}")
    log(f"apis on {', '.join(f':{a.port}' for a in apis)}, {args.workers} workers")

    # Every deployment gets a deploy; every fifth a second one right after
    # (ST-2: they run one after the other, in submit order). The deployments
    # go out in waves with pauses between them.
    ids = [f"chaos-{i}" for i in range(args.deployments)]
    plan = [(d, 2 if i % 5 == 0 else 1) for i, d in enumerate(ids)]
    n_waves = min(10, max(2, args.deployments // 2))
    waves = [plan[w::n_waves] for w in range(n_waves)]
    configuration = json.load(open(os.path.join(ROOT, "examples", "demo.json")))
    pg_restarted = threading.Event()
    submitter = Submitter(fleet, apis, waves, configuration, random.Random(rng.random()),
                          kill_wave=(n_waves - 1) // 2, pg_restarted=pg_restarted)
    submitter.start()

    # The chaos: worker kills every 1–2.5 s, the PostgreSQL restarts spread
    # evenly among them (the first after the api kill, the last before the
    # last wave of submits).
    actions = ["worker"] * args.kills
    for i in range(args.pg_restarts, 0, -1):
        actions.insert(round(i * args.kills / (args.pg_restarts + 1)), "postgres")
    kills, pg_restarts, chaos_errors = 0, 0, []
    if args.pg_restarts == 0:
        pg_restarted.set()
    for action in actions:
        time.sleep(rng.uniform(1.0, 2.5))  # pacing of the chaos, not a check
        if action == "postgres":
            if not submitter.api_killed.wait(timeout=300):
                chaos_errors.append("the api kill was not over 300s after a PostgreSQL restart was due")
            version = max(os.listdir("/etc/postgresql"),
                          key=lambda v: [int(x) for x in v.split(".") if x.isdigit()])
            pg_restarts += 1
            log(f"restarting PostgreSQL {version} ({pg_restarts}/{args.pg_restarts})")
            subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"], check=True)
            if pg_restarts == args.pg_restarts:
                pg_restarted.set()
            log("PostgreSQL is back")
        else:
            name = rng.choice(fleet.names("worker-"))
            pid = fleet.sigkill(name)
            fleet.spawn(name)
            kills += 1
            log(f"SIGKILLed {name} (pid {pid}) and restarted it ({kills}/{args.kills})")
    submitter.join(timeout=args.deadline)
    if submitter.is_alive():
        chaos_errors.append(f"the submits did not end within {args.deadline}s")
    accepted_n = sum(len(v) for v in submitter.accepted.values())
    log(f"{accepted_n} submits accepted for {len(ids)} deployments, "
        f"{sum(len(v) for v in submitter.transport.values())} failed at the transport level, "
        f"{sum(len(v) for v in submitter.refused.values())} answered 5xx")

    def ask(method, path):
        """Any api that answers."""
        status, body = None, "no api answered"
        for api in apis:
            status, body = api.call(method, path)
            if status is not None:
                break
        return status, body

    # Wait for every deployment to settle.
    end = time.time() + args.deadline
    states = {}
    while time.time() < end:
        states = {}
        for chunk in range(0, len(ids), 100):
            status, body = ask("GET", "/deployments?ids=" + ",".join(ids[chunk:chunk + 100]))
            if status == 200:
                states.update({x["id"]: x["state"] for x in body["deployments"]})
        if len(states) == len(ids) and all(s in ("active", "failed") for s in states.values()):
            break
        time.sleep(0.5)
    else:
        unsettled = sorted(d for d in ids if states.get(d) not in ("active", "failed"))
        log(f"not settled after {args.deadline}s: {', '.join(unsettled)}")

    # What the api says, read before the processes stop.
    builds_of, deployment_of, problems = {}, {}, {d: list(submitter.problems[d]) for d in ids}
    for d in ids:
        status, body = ask("GET", f"/deployments/{d}/builds")
        if status != 200:
            problems[d].append(f"GET /deployments/{d}/builds answered {status}: {body}")
            builds_of[d] = []
        else:
            builds_of[d] = list(reversed(body["builds"]))  # submit order
        status, body = ask("GET", f"/deployments/{d}")
        deployment_of[d] = body if status == 200 else f"answered {status}: {body}"
    build_ids = {b["id"] for bs in builds_of.values() for b in bs} | {
        b for bs in submitter.accepted.values() for b in bs}

    fleet.stop_all()
    left = strays(work, build_ids, run_id, run_started)
    for pid, marker, cmd, cwd in left:
        log(f"stray process: pid {pid} `{cmd}` ({MARKER}={marker}, cwd {cwd}) still runs after every "
            "api and worker stopped; killing it")
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    selftest_problem = selftest()

    # Per deployment.
    passed, failed, overlaps, superseded = 0, 0, 0, 0
    reruns, rerun_builds, extras = 0, [], []
    for d in ids:
        builds = builds_of[d]
        known = [b["id"] for b in builds]
        accepted = submitter.accepted[d]
        for b in accepted:
            if b not in known:
                problems[d].append(f"accepted build {b} is missing")
        extra = [b for b in known if b not in accepted]
        extras += extra
        transport = submitter.transport[d]
        if len(extra) > len(transport):
            why = (f"{len(transport)} submit(s) of it failed at the transport level ({'; '.join(transport)})"
                   if transport else "no submit of it failed at the transport level")
            refused = f"; 5xx answers: {'; '.join(submitter.refused[d])}" if submitter.refused[d] else ""
            problems[d].append(f"{len(extra)} build(s) not seen accepted ({', '.join(extra)}) but {why}{refused}")
        for i, b in enumerate(builds):
            reruns += max(0, b["attempts"] - 1)
            if b["attempts"] > 1:
                rerun_builds.append(f"{b['id']} x{b['attempts']}")
            if b["status"] == "superseded":
                # a queued deploy a newer submit made pointless; never the newest, never started.
                superseded += 1
                if i == len(builds) - 1 or b.get("started_at"):
                    problems[d].append(f"build {b['id']} was superseded although it "
                                       + ("is the newest" if i == len(builds) - 1 else "had started"))
            elif b["status"] != "succeeded":
                problems[d].append(f"build {b['id']} ended {b['status']} "
                                   f"(reason {b.get('reason')}, error {b.get('error')}, attempts {b['attempts']})")
        ran = [b for b in builds if b["status"] != "superseded"]
        for a, b in zip(ran, ran[1:]):
            if a.get("finished_at") and b.get("started_at") and b["started_at"] < a["finished_at"]:
                problems[d].append(f"build {b['id']} started at {b['started_at']}, before {a['id']} "
                                   f"finished at {a['finished_at']} (ST-2)")
        dep = deployment_of[d]
        if not isinstance(dep, dict):
            problems[d].append(f"GET /deployments/{d} {dep}")
        elif dep["state"] != "active":
            problems[d].append(f"state is {dep['state']}, expected active")
        try:
            recorded = open(os.path.join(work, "state", "provider", d, "overlaps")).read().strip()
        except FileNotFoundError:
            recorded = ""
        if recorded:
            overlaps += len(recorded.splitlines())
            problems[d].append("effects overlapped: " + " | ".join(recorded.splitlines()))
        if problems[d]:
            failed += 1
            log(f"FAIL {d}: " + "; ".join(problems[d]))
        else:
            passed += 1

    # The run as a whole.
    run_problems = []
    if kills < args.kills:
        run_problems.append(f"only {kills} of {args.kills} worker kills happened")
    if pg_restarts < args.pg_restarts:
        run_problems.append(f"PostgreSQL was restarted {pg_restarts} of {args.pg_restarts} times")
    if submitter.api_kill_note is None:
        run_problems.append("no api was killed mid-submit")
    run_problems += submitter.errors + chaos_errors
    if selftest_problem:
        run_problems.append(selftest_problem)
    if reruns > kills * BUILD_SLOTS:
        run_problems.append(f"{reruns} build re-runs exceed {kills} worker kills x BUILD_SLOTS {BUILD_SLOTS} "
                            f"= {kills * BUILD_SLOTS}: builds were re-run that no kill explains")
    if left:
        run_problems.append(f"{len(left)} stray process(es) outlived the fleet: "
                            + "; ".join(f"pid {pid} {MARKER}={m} `{c}`" for pid, m, c, _ in left))
    for problem in run_problems:
        failed += 1
        log(f"FAIL run: {problem}")

    log(f"{kills} worker kills, api killed: {submitter.api_kill_note or 'no'}, "
        f"PostgreSQL restarts: {pg_restarts}")
    log(f"re-runs: {reruns} over {len(rerun_builds)} builds (at most {kills * BUILD_SLOTS} = kills x BUILD_SLOTS), "
        f"superseded: {superseded}, overlaps: {overlaps}, stray processes: {len(left)}")
    if extras:
        log(f"builds of submits whose connection failed (not seen accepted): {', '.join(extras)}")
    if rerun_builds and (failed or reruns > kills * BUILD_SLOTS):
        log("builds re-run (attempts): " + ", ".join(rerun_builds))
    if failed == 0:
        logs.close()
        _events = None
        shutil.rmtree(work, ignore_errors=True)
        psql(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
    else:
        log(f"kept {work} (processes.log) and database {DB_NAME} for inspection")
    print(f"{passed} passed, {failed} failed", flush=True)
    sys.exit(0 if failed == 0 else 1)


main()
