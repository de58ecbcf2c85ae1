"""Write the test tones: low.wav (200 Hz sine) and high.wav (3000 Hz sine), 1.5 s each,
16 kHz mono 16-bit PCM, amplitude 0.5 with 20 ms fades so neither clicks.
usage: make_tones.py [OUT_DIR]   (default: this script's folder)
"""
import math, os, struct, sys, wave

RATE, SECONDS, AMP, FADE = 16000, 1.5, 0.5, 0.02
out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
for name, hz in (('low', 200.0), ('high', 3000.0)):
    n = int(RATE * SECONDS)
    fade = int(RATE * FADE)
    frames = bytearray()
    for i in range(n):
        env = min(1.0, i / fade, (n - 1 - i) / fade)
        frames += struct.pack('<h', int(round(32767 * AMP * env * math.sin(2 * math.pi * hz * i / RATE))))
    path = os.path.join(out_dir, f'{name}.wav')
    with wave.open(path, 'wb') as w:
        w.setnchannels(1); w.setsampwidth(2); w.setframerate(RATE)
        w.writeframes(bytes(frames))
    print('wrote', path, f'{hz:g} Hz', f'{SECONDS:g} s')
