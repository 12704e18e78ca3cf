"""A stand-in for the front door of the local provider's nodes (the
reference module source's meta.readiness.connect): the local provider's
nodes serve nothing themselves, so this answers for them.

    front-door.py PORT DOMAIN

Listens on 127.0.0.1:PORT. `GET /api/version` with a `Host` that is DOMAIN
or a name under it answers 200 with `X-Instance-Host: <that host>` (what a
node's web server answers once it serves); any other host or path is 404.
"""
import http.server
import json
import sys

port, domain = int(sys.argv[1]), sys.argv[2].lower().rstrip(".")


class FrontDoor(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        host = (self.headers.get("Host") or "").split(":")[0].lower().rstrip(".")
        ours = host == domain or host.endswith("." + domain)
        if self.path == "/api/version" and ours:
            body = json.dumps({"host": host, "served_by": "the quickstart's front door"}).encode()
            self.send_response(200)
            self.send_header("X-Instance-Host", host)
        else:
            body = b'{"error": "not_found"}'
            self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args):
        sys.stderr.write("front-door: %s %s\n" % (self.headers.get("Host"), format % args))


http.server.ThreadingHTTPServer(("127.0.0.1", port), FrontDoor).serve_forever()
