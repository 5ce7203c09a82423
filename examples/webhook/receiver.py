"""A webhook receiver for herald in Python (stdlib only): checks each request's signature, then
handles each event once. HERALD_HOOK_SECRET: herald's --hook-secret; PORT: where to listen."""
import hashlib, hmac, json, os, time
from http.server import BaseHTTPRequestHandler, HTTPServer

SECRET = os.environ["HERALD_HOOK_SECRET"].encode()
TOLERANCE_S = 300  # a signature older (or newer) than this is a replay: refused
seen = set()  # in production: a table with a unique key on (workspace, chat, seq)


def verify(header, body):
    """Whether `header` (t=<unix seconds>,v1=<hex>) signs `body` with the secret, recently."""
    parts = dict(kv.split("=", 1) for kv in header.split(",") if "=" in kv)
    if not parts.get("t", "").isdigit() or abs(time.time() - int(parts["t"])) > TOLERANCE_S:
        return False
    want = hmac.new(SECRET, parts["t"].encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(want.encode(), parts.get("v1", "").encode())  # constant time


class Hook(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if not verify(self.headers.get("Herald-Signature", ""), body):
            print("rejected: bad signature", flush=True)
            self.send_response(401)
            self.end_headers()
            return
        for e in json.loads(body)["events"]:
            key = (e["workspace"], e["chat"], e["seq"])
            if key in seen:
                continue  # delivered again (at least once): already handled
            seen.add(key)
            offline = " offline=" + ",".join(e["offline"]) if "offline" in e else ""
            print("accepted %s/%s/%d %s%s" % (*key, e["type"], offline), flush=True)
        self.send_response(204)  # any 2xx acknowledges the whole batch
        self.end_headers()

    def log_message(self, *args):
        pass


HTTPServer(("127.0.0.1", int(os.environ.get("PORT", "8000"))), Hook).serve_forever()
