"""Writes the vision tests' images into this folder (they are committed; run again only to
change them): usage `make_images.py [FOLDER]`, with Pillow (PyPI `pillow`; 13.0.0 made the
committed files).

Images a model is asked about:
  red.png, green.png, blue.png  64x64, one saturated colour each (what the colour projector,
                                make_color_mmproj.py, tells apart)
  blue.jpg                      the blue one as a JPEG (quality 90, 4:2:0)
  gradient-640x480.png          a non-square, larger, photo-like image (smooth gradients and a
                                few shapes) for the benchmark and for resizing/slicing

Hostile inputs, each to be refused (a 400 naming the part), never a crash or a huge allocation:
  bomb.png                      a valid PNG whose header claims 100000x100000 RGB (30 GB once
                                decoded) in a few hundred bytes: its IDAT is one row of zeros
                                (300 KB inflated), valid zlib, then IEND: a decoder that trusts
                                the header allocates before it finds the data short
  truncated.png                 gradient-640x480.png cut after its first 2,000 bytes (signature
                                and header intact, image data cut mid-stream, no IEND)
  not-an-image.txt              plain text
"""
import os, struct, sys, zlib
from PIL import Image, ImageDraw

out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))

for name, rgb in (("red", (255, 0, 0)), ("green", (0, 255, 0)), ("blue", (0, 0, 255))):
    Image.new("RGB", (64, 64), rgb).save(os.path.join(out, f"{name}.png"), optimize=True)
Image.new("RGB", (64, 64), (0, 0, 255)).save(
    os.path.join(out, "blue.jpg"), quality=90, subsampling=2)

# Photo-like: a sky-to-ground gradient, a sun, a hill and a house; no noise, so the file stays
# small.
w, h = 640, 480
img = Image.new("RGB", (w, h))
px = img.load()
for y in range(h):
    for x in range(w):
        if y < h * 0.6:  # sky: deep blue at the top to pale at the horizon
            t = y / (h * 0.6)
            px[x, y] = (int(40 + 150 * t), int(90 + 130 * t), int(200 + 50 * t))
        else:            # ground: green, darker to the bottom, warmer to the right
            t = (y - h * 0.6) / (h * 0.4)
            px[x, y] = (int(60 + 60 * x / w), int(160 - 80 * t), int(50 - 30 * t))
d = ImageDraw.Draw(img)
d.ellipse((480, 50, 560, 130), fill=(250, 220, 90))                 # sun
d.ellipse((-100, 230, 360, 480), fill=(70, 130, 60))                # hill
d.rectangle((380, 230, 500, 320), fill=(180, 60, 50))               # house
d.polygon([(370, 230), (440, 170), (510, 230)], fill=(110, 50, 40))  # roof
d.rectangle((425, 270, 455, 320), fill=(90, 60, 30))                # door
gradient = os.path.join(out, "gradient-640x480.png")
img.save(gradient, optimize=True)

def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

side = 100_000
row = b"\x00" + bytes(side * 3)  # filter byte 0, then black
with open(os.path.join(out, "bomb.png"), "wb") as f:
    f.write(b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(row, 9))
            + chunk(b"IEND", b""))

with open(gradient, "rb") as f:
    whole = f.read()
with open(os.path.join(out, "truncated.png"), "wb") as f:
    f.write(whole[:2000])

with open(os.path.join(out, "not-an-image.txt"), "w") as f:
    f.write("This is plain text, not an image.\n")

for name in sorted(os.listdir(out)):
    if name.endswith((".png", ".jpg", ".txt")):
        print(f"{name:24} {os.path.getsize(os.path.join(out, name)):>7} bytes")
