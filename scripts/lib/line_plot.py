"""A small line plot drawn with Pillow (Debian: python3-pil): axes with ticks, several series,
a legend and a title, saved as PNG. Matplotlib is not used because Debian's python3-matplotlib
pulls in libboost1.74-dev, which conflicts with the Boost 1.81 this project builds against."""
import math

from PIL import Image, ImageDraw, ImageFont

COLORS = [(31, 119, 180), (214, 39, 40), (44, 160, 44), (148, 103, 189)]


def _font(size):
    for path in ("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",):
        try:
            return ImageFont.truetype(path, size)
        except OSError:
            pass
    return ImageFont.load_default()


def _ticks(lo, hi, count=6):
    """Round tick values covering [lo, hi]."""
    span = hi - lo if hi > lo else 1.0
    raw = span / count
    step = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * step:
            step *= m
            break
    first = math.floor(lo / step) * step
    ticks = [first]
    # The last tick covers hi; at least two ticks, so a single point (lo == hi) has a range.
    while ticks[-1] < hi - step * 1e-9 or len(ticks) < 2:
        ticks.append(round(ticks[-1] + step, 12))
    return ticks


def line_plot(series, path, title, xlabel, ylabel, size=(900, 540)):
    """series: {label: [(x, y), ...]}. Writes a PNG to path."""
    w, h = size
    left, right, top, bottom = 80, 20, 50, 60
    img = Image.new("RGB", size, "white")
    d = ImageDraw.Draw(img)
    font, small = _font(15), _font(13)
    xs = [x for pts in series.values() for x, _ in pts]
    ys = [y for pts in series.values() for _, y in pts]
    xt, yt = _ticks(min(xs), max(xs)), _ticks(min(ys), max(ys))
    x0, x1, y0, y1 = xt[0], xt[-1], yt[0], yt[-1]

    def px(x, y):
        return (left + (x - x0) / (x1 - x0) * (w - left - right),
                h - bottom - (y - y0) / (y1 - y0) * (h - top - bottom))

    for y in yt:
        a, b = px(x0, y), px(x1, y)
        d.line([a, b], fill=(225, 225, 225))
        d.text((left - 8, a[1]), f"{y:g}", fill="black", font=small, anchor="rm")
    for x in xt:
        a, b = px(x, y0), px(x, y1)
        d.line([a, b], fill=(235, 235, 235))
        d.text((a[0], h - bottom + 8), f"{x:g}", fill="black", font=small, anchor="mt")
    d.rectangle([px(x0, y1), px(x1, y0)], outline="black")
    for i, (label, pts) in enumerate(series.items()):
        color = COLORS[i % len(COLORS)]
        coords = [px(x, y) for x, y in pts]
        d.line(coords, fill=color, width=3)
        for cx, cy in coords:
            d.ellipse([cx - 3, cy - 3, cx + 3, cy + 3], fill=color)
        lx, ly = w - right - 230, top + 15 + 24 * i
        d.line([(lx, ly), (lx + 30, ly)], fill=color, width=3)
        d.text((lx + 38, ly), label, fill="black", font=font, anchor="lm")
    d.text((w / 2, 22), title, fill="black", font=font, anchor="mm")
    d.text(((left + w - right) / 2, h - 18), xlabel, fill="black", font=font, anchor="mm")
    label_img = Image.new("RGB", (h, 30), "white")
    ImageDraw.Draw(label_img).text((h / 2, 15), ylabel, fill="black", font=font, anchor="mm")
    img.paste(label_img.rotate(90, expand=True), (5, 0))
    img.save(path)
