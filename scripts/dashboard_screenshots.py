"""Copy the browser tests' screenshots (artifacts/dashboard/, written by `make test`) into
docs/img/dashboard/ for docs/dashboard.md: scaled to 1280 px wide, cut at 1800 px high and
stored as 256-colour PNGs, so the repository stays small.

    python scripts/dashboard_screenshots.py [--artifacts artifacts/dashboard] [--out docs/img/dashboard]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from PIL import Image

REPO = Path(__file__).resolve().parents[1]
# The pages docs/dashboard.md shows: every page in English, and the overview and task page in Chinese.
SHOWN = [
    "login-en",
    "overview-en",
    "overview-zh-CN",
    "resources-en",
    "pool-en",
    "tasks-en",
    "task-plan-en",
    "task-detail-en",
    "task-detail-zh-CN",
    "tenants-en",
    "approvals-en",
    "cost-en",
    "audit-en",
    "capacity-zh-CN",
    "goal-options-en",
    "goal-options-zh-CN",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--artifacts", type=Path, default=REPO / "artifacts" / "dashboard")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "img" / "dashboard")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    missing = [name for name in SHOWN if not (args.artifacts / f"{name}.png").exists()]
    if missing:
        raise SystemExit(f"missing screenshots (run the browser tests first: make test): {', '.join(missing)}")
    for name in SHOWN:
        image = Image.open(args.artifacts / f"{name}.png").convert("RGB")
        scale = 1280 / image.width
        image = image.resize((1280, round(image.height * scale)), Image.LANCZOS)
        image = image.crop((0, 0, 1280, min(image.height, 1800)))
        target = args.out / f"{name}.png"
        image.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(target, optimize=True)
        print(f"{target.relative_to(REPO)}  {target.stat().st_size // 1024} KiB")


if __name__ == "__main__":
    main()
