"""The operator console as a browser paints it: the run page of a run with 2,000 facts and the
run list over 10,000 runs, loaded in headless Chromium (Debian's, through Playwright) from the
real app served by uvicorn; the feeds are fed the records the run decider would write (no
broker, as in dashboard_bench.py).

Run: .venv/bin/python benchmarks/console_paint_bench.py [--facts 2000] [--runs 10000] [--repeat 5]

For each page, --repeat fresh navigations (signed in, cache off) report the browser's own
timing: the first byte of the response (the server's share), first contentful paint
(`performance.getEntriesByType("paint")`), largest contentful paint (the biggest text block:
on the run page the facts or the tool calls, so a page that paints its header early does not
pass for painted), DOMContentLoaded and the load event
(`PerformanceNavigationTiming`, from navigation start), as min / median / max milliseconds,
and the page's transfer size.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import uvicorn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dashboard_bench import RUN, fed_dashboard, operator_users  # noqa: E402

from runfacts.dashboard.app import Dashboard, create_app  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
TIMING = """() => new Promise(resolve => {
  const nav = performance.getEntriesByType("navigation")[0];
  const fcp = performance.getEntriesByType("paint").find(p => p.name === "first-contentful-paint");
  new PerformanceObserver(list => {
    const lcp = list.getEntries().at(-1);
    resolve({ttfb: nav.responseStart, fcp: fcp ? fcp.startTime : -1, lcp: lcp ? lcp.startTime : -1,
             dcl: nav.domContentLoadedEventEnd, load: nav.loadEventEnd,
             bytes: nav.transferSize || nav.encodedBodySize});
  }).observe({type: "largest-contentful-paint", buffered: true});
})"""


def serve(d: Dashboard) -> tuple[uvicorn.Server, str]:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(d, manage_feed=False), host="127.0.0.1", port=port,
                                           log_level="warning", timeout_graceful_shutdown=1))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return server, f"http://127.0.0.1:{port}"


def measure(page: Any, url: str, repeat: int, shows: str) -> list[dict[str, float]]:
    found = []
    for _ in range(repeat + 1):  # the first warms the server's decoded-facts cache and is dropped
        page.goto(url, wait_until="load")
        assert page.locator(shows).count() > 0, f"{url} does not show {shows}"
        page.wait_for_timeout(200)  # let the load event's end be recorded
        found.append(page.evaluate(TIMING))
    return found[1:]


def report(name: str, timings: list[dict[str, float]]) -> None:
    def stat(key: str) -> str:
        values = [t[key] for t in timings]
        return f"{min(values):6.0f} / {statistics.median(values):6.0f} / {max(values):6.0f}"
    print(f"{name:<32} first byte {stat('ttfb')} | FCP {stat('fcp')} | LCP {stat('lcp')} | "
          f"DOMContentLoaded {stat('dcl')} | "
          f"load {stat('load')} ms "
          f"(min / median / max) | {timings[0]['bytes'] / 1024:6.0f} KiB")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--facts", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        d, _state, log = fed_dashboard(args.facts, args.runs, operator_users(tmp), "bench-paint")
        facts = len(log)
        server, base = serve(d)
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                page = browser.new_page()
                page.route("**/*", lambda route: route.continue_(headers={**route.request.headers,
                                                                          "cache-control": "no-cache"}))
                page.goto(f"{base}/login")
                page.fill("#username", "olga")
                page.fill("#password", "olga-pw")
                page.click("#sign-in")
                page.wait_for_url(f"{base}/")
                print(f"Chromium {browser.version}; run page {facts} facts; run list {len(d.states)} runs")
                report(f"run page ({facts} facts)", measure(page, f"{base}/runs/{RUN}", args.repeat,
                                                                     "#timeline tr, #timeline li, .call"))
                report(f"run list ({len(d.states)} runs, page 1)",
                       measure(page, f"{base}/", args.repeat, "#runs tr[data-run]"))
                pages = -(-len(d.states) // 50)
                report(f"run list (page {pages})", measure(page, f"{base}/?page={pages}", args.repeat,
                                                                       "#runs tr[data-run]"))
                browser.close()
        finally:
            server.should_exit = True
    return 0


if __name__ == "__main__":
    sys.exit(main())
