"""The exported web page in a real browser: its size and how fast it generates, for the budget shapes.

For each shape (the 100-second and 600-second models of ``--time-budget``), a
model is made by one training step (the speed does not depend on the weights),
exported, and opened in headless Chromium with ``autorun``. After a warm-up, the
page's own counter of characters is read twice through the DevTools protocol
(over a pipe, so nothing listens on a port), and the rate between the readings
is reported: real wall-clock time, not the virtual time of ``--virtual-time-budget``.

    python benchmarks/browser.py            # needs chromium (apt-get install chromium)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import charrnn
from charrnn.utils.hardware import processor_name

SHAPES = {"100-s shape (2×256 LSTM, skip connections)": {"hidden_size": 256, "skip_connections": True},
          "600-s shape (2×512 LSTM)": {"hidden_size": 512, "dropout": 0.2}}
WARM_UP_S, MEASURE_S = 5.0, 20.0


class DevTools:
    """The DevTools protocol over ``--remote-debugging-pipe`` (messages end with a NUL byte)."""

    def __init__(self, chromium: str, profile: Path):
        to_browser_read, self._send = os.pipe()
        self._receive, from_browser_write = os.pipe()

        def as_fds_3_and_4() -> None:  # the browser reads commands on fd 3 and writes replies on fd 4
            reading, writing = os.dup(to_browser_read), os.dup(from_browser_write)
            os.dup2(reading, 3)
            os.dup2(writing, 4)

        self.process = subprocess.Popen(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
             "--remote-debugging-pipe"], pass_fds=(3, 4, to_browser_read, from_browser_write),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=as_fds_3_and_4)
        os.close(to_browser_read)
        os.close(from_browser_write)
        self._buffer, self._next_id = b"", 0

    def call(self, method: str, session: str | None = None, **params) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        os.write(self._send, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in self._buffer:
                self._buffer += os.read(self._receive, 1 << 16)
            raw, self._buffer = self._buffer.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._next_id:
                return reply.get("result", {})

    def close(self) -> None:
        self.process.kill()
        self.process.wait()


def characters_so_far(tools: DevTools, session: str) -> int:
    status = tools.call("Runtime.evaluate", session, returnByValue=True,
                        expression="document.getElementById('status').textContent")["result"].get("value", "")
    found = re.match(r"([\d,]+) characters", status)
    return int(found.group(1).replace(",", "")) if found else 0


def main() -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("needs chromium (apt-get install chromium)")
    corpus = charrnn.get_dataset().path
    version = subprocess.run([chromium, "--version"], capture_output=True, text=True).stdout.split()[1]
    print(f"{processor_name()}, Chromium {version}")
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        for name, shape in SHAPES.items():
            run = root / re.sub(r"\W+", "-", name)
            charrnn.train(corpus, out_dir=run, max_steps=1, **shape)
            page = charrnn.export(run / "best.pt", root / f"{run.name}.html")
            tools = DevTools(chromium, root / f"profile-{run.name}")
            try:
                url = f"{page.path.as_uri()}?prime=ROMEO:&length=1000000&temperature=0.8&autorun=1"
                target = tools.call("Target.createTarget", url=url)
                session = tools.call("Target.attachToTarget", targetId=target["targetId"],
                                     flatten=True)["sessionId"]
                time.sleep(WARM_UP_S)
                first, started = characters_so_far(tools, session), time.perf_counter()
                time.sleep(MEASURE_S)
                rate = (characters_so_far(tools, session) - first) / (time.perf_counter() - started)
            finally:
                tools.close()
            print(f"{name}: page {page.size / 1e6:.1f} MB ({page.parameters:,} parameters), "
                  f"{rate:,.0f} characters/s")


if __name__ == "__main__":
    main()
