#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""A TEST DOUBLE of an OpenAI-compatible chat server, for the client tests
that need scripted replies (429 storms, Retry-After, 5xx, hangs, garbage).
It is not a model server: the real one in the tests is llama.cpp's.

usage: llm-double.py SCRIPT LOG PORTFILE

SCRIPT is a JSON list; request k gets step k (the last step repeats):
  {"status": 429, "headers": {"Retry-After": "1"}, "body": "..."}
  {"delay_s": 3}                     sleep before answering (a hang)
  {"content": "text", "finish_reason": "stop", "reasoning_tokens": 5}
  {"raw": "not json"}                this body as it is, status 200
Every request is logged to LOG as one JSON line: t (monotonic s), path,
the body, and auth: whether the Authorization header is "Bearer " + $DOUBLE_KEY
(the key itself is never logged).  The port it listens on (loopback, chosen
by the kernel) is written to PORTFILE once it is ready.
"""
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

script = json.load(open(sys.argv[1]))
log_path = sys.argv[2]
lock = threading.Lock()
count = [0]


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n).decode()
        with lock:
            k = count[0]
            count[0] += 1
            step = script[min(k, len(script) - 1)]
            key = os.environ.get("DOUBLE_KEY", "")
            rec = {"k": k, "t": time.monotonic(), "path": self.path, "body": body,
                   "auth": self.headers.get("Authorization") == "Bearer " + key if key
                   else self.headers.get("Authorization") is None}
            with open(log_path, "a") as f:
                f.write(json.dumps(rec) + "\n")
        time.sleep(step.get("delay_s", 0))
        status = step.get("status", 200)
        if "raw" in step:
            out = step["raw"].encode()
        elif "body" in step:
            out = step["body"].encode()
        else:
            usage = {"prompt_tokens": 7, "completion_tokens": step.get("completion_tokens", 3),
                     "total_tokens": 10}
            if "reasoning_tokens" in step:
                usage["completion_tokens_details"] = {"reasoning_tokens": step["reasoning_tokens"]}
            out = json.dumps({"id": "double", "object": "chat.completion", "choices": [
                {"index": 0, "finish_reason": step.get("finish_reason", "stop"),
                 "message": {"role": "assistant", "content": step.get("content", "pong")}}],
                "usage": usage}).encode()
        try:
            self.send_response(status)
            for h, v in step.get("headers", {}).items():
                self.send_header(h, v)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (its timeout): what a hang test wants


srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
srv.daemon_threads = True
with open(sys.argv[3] + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
os.rename(sys.argv[3] + ".tmp", sys.argv[3])
srv.serve_forever()
