#!/usr/bin/env python3
"""A webhook receiver for the webhook tests (worker/tests/it/webhooks.rs).

Listens on 127.0.0.1:PORT and verifies every POST with the real Standard
Webhooks verifier from PyPI (`standardwebhooks.Webhook(secret).verify`,
installed by scripts/install-deps). Appends one JSON line per request to
RECORD: {"verified": true, "id": webhook-id, "payload": <the parsed body>}
for a delivery it accepted (answered 204), or {"verified": false,
"error": "..."} for one it refused (answered 400).

Usage: webhook_receiver.py PORT RECORD [MODE]
  The secret is read from the environment (WEBHOOK_SECRET), never from the
  command line. MODE: `accept` (default); `status:503` answers that status
  after verifying; `redirect:URL` answers 302 to URL after verifying;
  `retry-after:N` answers 429 with `Retry-After: N` after verifying.
"""

import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

PORT = int(sys.argv[1])
RECORD = sys.argv[2]
MODE = sys.argv[3] if len(sys.argv) > 3 else "accept"
VERIFIER = Webhook(os.environ["WEBHOOK_SECRET"])


def record(entry):
    with open(RECORD, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")
        f.flush()


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (the http.server name)
        length = int(self.headers.get("content-length", "0"))
        body = self.rfile.read(length)
        headers = {k: v for k, v in self.headers.items()}
        try:
            payload = VERIFIER.verify(body, headers)
        except WebhookVerificationError as e:
            record({"verified": False, "error": str(e), "path": self.path})
            self.send_response(400)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        record({"verified": True, "id": headers.get("webhook-id") or headers.get("Webhook-Id"),
                "path": self.path, "payload": payload})
        if MODE.startswith("status:"):
            self.send_response(int(MODE.split(":", 1)[1]))
            body = b"failing on purpose"
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif MODE.startswith("retry-after:"):
            self.send_response(429)
            self.send_header("retry-after", MODE.split(":", 1)[1])
            self.send_header("content-length", "0")
            self.end_headers()
        elif MODE.startswith("redirect:"):
            self.send_response(302)
            self.send_header("location", MODE.split(":", 1)[1])
            self.send_header("content-length", "0")
            self.end_headers()
        else:
            self.send_response(204)
            self.end_headers()

    def log_message(self, *args):
        pass


ThreadingHTTPServer.allow_reuse_address = True
server = ThreadingHTTPServer(("127.0.0.1", PORT), Handler)
print("listening", flush=True)
server.serve_forever()
