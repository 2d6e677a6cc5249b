"""Neuroglancer's Python server for test_serve_browser.py; runs in .venv-neuroglancer (made by
scripts/setup.sh from tests/python/venvs/neuroglancer.txt), which holds the built web client.

    .venv-neuroglancer/bin/python ng_viewer.py

One JSON object a line on stdout, one a line on stdin:
  out {"viewer_url": URL, "origin": ORIGIN}   the server listens on 127.0.0.1 (port 0)
  in  {"source": SOURCE, "size": [W, H], "png": PATH, "background": "#RRGGBB"}
                                              one image layer from SOURCE in one xy panel on
                                              that background, without axis lines, scale bar
                                              or bounding box
  out {"state": "set"}                        a browser may open the viewer URL now
  out {"stats": ...}                          (repeated) the client's chunk statistics
  out {"screenshot": PATH, "width": W, "height": H}
                                              written once the client had every chunk of the
                                              view in memory and drew it (Neuroglancer takes a
                                              screenshot only when the view is complete)
Then it exits. It waits for a browser as long as it is let live: the caller bounds that.
"""

from __future__ import annotations

import json
import sys

import neuroglancer


def say(**kw) -> None:
    print(json.dumps(kw), flush=True)


def main() -> int:
    neuroglancer.set_server_bind_address("127.0.0.1", 0)
    viewer = neuroglancer.Viewer()
    url = viewer.get_viewer_url()
    origin = "/".join(url.split("/")[:3])
    say(viewer_url=url, origin=origin)

    ask = json.loads(sys.stdin.readline())
    with viewer.txn() as s:
        s.layers["image"] = neuroglancer.ImageLayer(source=ask["source"])
        s.layout = "xy"
        s.show_axis_lines = False
        s.show_scale_bar = False
        s.show_default_annotations = False
        s.cross_section_background_color = ask["background"]
    say(state="set")

    def stats(st) -> None:
        say(stats=str(st)[:2000])

    shot = viewer.screenshot(size=ask["size"], statistics_callback=stats).screenshot
    with open(ask["png"], "wb") as f:
        f.write(shot.image)
    say(screenshot=ask["png"], width=shot.width, height=shot.height)
    return 0


if __name__ == "__main__":
    sys.exit(main())
