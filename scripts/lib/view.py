"""Small JSON helpers for the shell scripts: `view.py <what> [args]`, JSON on stdin."""
import json
import sys


def main():
    what, args = sys.argv[1], sys.argv[2:]
    if what == "submit-body":
        # submit-body FILE [A.B.C=VAR ...]: the file as a submit's body, each
        # dotted path set to the value of environment variable VAR (so a
        # secret never appears on a command line)
        import os
        configuration = json.load(open(args[0]))
        for assignment in args[1:]:
            path, var = assignment.split("=", 1)
            *parents, last = path.split(".")
            node = configuration
            for key in parents:
                node = node.setdefault(key, {})
            node[last] = os.environ[var]
        print(json.dumps({"configuration": configuration}))
        return
    d = json.load(sys.stdin)
    if what == "get":
        # get KEY[.KEY...]: prints one field ("" when absent)
        for key in args[0].split("."):
            d = d.get(key) if isinstance(d, dict) else None
        print("" if d is None else d)
    elif what == "deployment":
        b = d.get("last_build") or {}
        print(f"state:  {d['state']}")
        print(f"domain: {d['domain']}")
        print(f"build:  {b.get('id')} ({b.get('status')})")
        print("instances:")
        for i in d["deployed_instances"]:
            print(f"  {i['name']:<10} {i['url']:<40} section {i['section'] or '-'}")
    elif what == "readiness-states":
        # one line per deployed instance: its readiness state
        for i in d["deployed_instances"]:
            print((i.get("readiness") or {}).get("state", "unknown"))
    elif what == "readiness":
        for i in d["deployed_instances"]:
            r = i.get("readiness") or {}
            why = f" ({r['reason']})" if r.get("reason") else ""
            print(f"  {i['name']:<10} {i['url']:<40} {r.get('state', 'unknown')}{why}, checked {r.get('checked_at')}")
    elif what == "secrets-set":
        # each application's secretsSet in a deployment's stored configuration
        for name, app in sorted(d["configuration"].get("applications", {}).items()):
            if app.get("secretsSet"):
                print(f"  {name:<10} secretsSet {json.dumps(app['secretsSet'])}")
    elif what == "sbom-list":
        for n in d["nodes"]:
            print(f"  {n['node']:<10} {n['status']:<12} from {n['build_id']}")
    elif what == "sbom-nodes":
        print(" ".join(n["node"] for n in d["nodes"] if n["status"] == "ready"))
    elif what == "report-nodes":
        print(len(d["report"]["nodes"]))
    elif what == "components":
        assert d.get("bomFormat") == "CycloneDX", "not a CycloneDX document"
        print(len(d["components"]))
    else:
        sys.exit(f"view.py: unknown view {what}")


main()
