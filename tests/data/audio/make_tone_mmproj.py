"""Build a tiny, hand-wired ultravox-type AUDIO projector (mmproj) for a given text GGUF.

It is not a model that hears: no weight is trained. It tells a low-pitched sound from a
high-pitched one and hands the text model its own embedding of " low" or " high".
The 'whisper encoder' reads llama.cpp's whisper-style log-mel spectrogram (80 mel bins, 10 ms
frames, clamped to 8 decades below the clip's loudest bin, then (x+4)/4; every clip is padded with
silence to a 30 s chunk of 3000 frames) and
  * conv1d #1 (kernel 3, centre tap only) computes, per frame, d = W * (sum of the 20 low mel bins,
    centres 74-782 Hz) - W/2 * (sum of the 40 high mel bins, centres 1.6-7.1 kHz); channel 0 is
    gelu(d) ("low"), channel 1 gelu(-d) ("high"). Both sides weigh 20*W in all, so a silent frame
    (every bin at the clamp floor) gives d = 0 exactly, whatever the loudness;
  * conv1d #2 (kernel 3, stride 2, centre tap) passes both channels on (gelu again);
  * one transformer block whose attention and FFN outputs are zero (residual only), zero
    position embeddings, no post-norm;
  * ultravox's projector: STACK consecutive frames are stacked into one token; RMS-norm;
    mm.a.mlp.1 sums channel 0 and channel 1 over the stack into two hidden units (both halves of
    the SwiGLU get the same sum, so each unit is x*silu(x)); RMS-norm (mid-norm weight 1/sqrt(2),
    so a pure unit is 1); mm.a.mlp.2 maps unit 0 to the text model's embedding of LOW_WORD and unit 1
    to that of HIGH_WORD.
So a low tone becomes a few tokens that are each the embedding of " low", a high tone of " high",
and silence (the padding included) zero vectors (RMS-norm of zero is zero; no bias anywhere).

Why ultravox: of the whisper-encoder audio projectors llama.cpp ships (ultravox, qwen2a, voxtral,
glma, meralion, ...), ultravox and qwen2a need the fewest tensors (the encoder plus 4 and 2
projector tensors). qwen2a wraps the audio in the literal text "<|audio_bos|>...<|audio_eos|>",
which a plain Qwen2.5 vocabulary reads as odd text, and always makes 750 tokens of a 30 s chunk
(a 1.5 s tone: 25 tokens of signal, 725 of silence); voxtral and glma also add text markers.
ultravox adds no text, and its frame stacking sets the token count: STACK=30 makes a 30 s chunk
50 tokens (one per 0.6 s), so a 1.5 s tone is 3 " low" tokens among 47 silent ones.
STACK must divide 1500: llama.cpp expects floor(3000/STACK)/2 tokens but the graph pads to
ceil(1500/STACK), and a mismatch aborts the whole process (8, Ultravox's own value, gives 187 vs
188). With more tokens (STACK 4-20) the default 0.5B model named the tone when the question came
before the audio but said "High"/"Yes"/"A" for the low tone when the audio came first, and a
transcription repeated the word until the output limit; at 30 (and 75) it was right either way
and the transcription stopped.

usage: make_tone_mmproj.py TEXT_MODEL.gguf OUT.gguf   (TONE_STACK=N overrides STACK)
Only the two needed rows of the embedding table are dequantised, and OUT is written beside itself
and renamed into place, so builders running at once never see half a file.
"""
import os, sys, numpy as np, gguf
from gguf.quants import dequantize

LOW_WORD, HIGH_WORD = 'low', 'high'
N_MEL = 80                  # whisper v1/v2 mel count (llama.cpp builds the filterbank from it)
D, HEADS, FF = 8, 2, 16     # encoder width, heads, ffn width (the block is the identity)
STACK = int(os.environ.get("TONE_STACK", 30))  # frames stacked into one token; see above
W = 2.0                     # weight of a low-band bin; a high-band bin weighs -W/2
N_POS = 1500                # positions after conv #2 (3000 mel frames per 30 s chunk)
LOW_HZ, HIGH_HZ = (50.0, 800.0), (1550.0, 7200.0)   # 20 and 40 of the 80 mel bins

assert N_POS % STACK == 0, f'STACK={STACK} must divide {N_POS}'
text_path, out_path = sys.argv[1], sys.argv[2]
r = gguf.GGUFReader(text_path)
arch = r.fields['general.architecture'].contents()
n_embd_llm = int(r.fields[f'{arch}.embedding_length'].contents())
tokens = r.fields['tokenizer.ggml.tokens'].contents()
emb = [t for t in r.tensors if t.name == 'token_embd.weight'][0]
ids = []
for word in (LOW_WORD, HIGH_WORD):
    for cand in ('\u0120' + word, '\u2581' + word, word):  # GPT-2 BPE space, SentencePiece, bare
        if cand in tokens:
            ids.append(tokens.index(cand)); break
    else:
        sys.exit(f'no token for {word}')
print('word token ids', ids, [tokens[i] for i in ids])
rows = dequantize(np.asarray(emb.data[ids]), emb.tensor_type).reshape(len(ids), n_embd_llm)


def mel_centres(n_mel, sr=16000):
    """Centre frequencies of llama.cpp's (Slaney, librosa-default) mel filterbank, fmin 0, fmax sr/2."""
    lin, min_log_mel, log_step = 3 / 200., 15.0, np.log(6.4) / 27
    hz_to_mel = lambda f: f * lin if f < 1000 else min_log_mel + np.log(f / 1000) / log_step
    mel_to_hz = lambda m: m / lin if m < min_log_mel else 1000 * np.exp((m - min_log_mel) * log_step)
    top = hz_to_mel(sr / 2)
    return np.array([mel_to_hz(top * (i + 1) / (n_mel + 1)) for i in range(n_mel)])


centres = mel_centres(N_MEL)
low = (centres >= LOW_HZ[0]) & (centres <= LOW_HZ[1])
high = (centres >= HIGH_HZ[0]) & (centres <= HIGH_HZ[1])
# Silence must give exactly 0: every bin of a silent frame holds the same floor value, so the low
# and high weights must have exactly equal sums *as stored* (f16) and as summed (f32). W and W/2
# over 20 and 40 bins are exact; 8/25 and 8/40 are not, and the rounding left silent frames a
# tiny d that the RMS norms below blow up to a full " high" token (the model then heard "high"
# everywhere the audio was silent).
assert high.sum() == 2 * low.sum(), (low.sum(), high.sum())
band = np.zeros(N_MEL, np.float32)
band[low] = W
band[high] = -W / 2
print(f'low band: {low.sum()} mel bins, high band: {high.sum()} mel bins')

f32 = np.float32
part_path = f'{out_path}.{os.getpid()}.part'
w = gguf.GGUFWriter(part_path, 'clip')
w.add_string('general.name', 'hand-wired tone projector (not a trained model)')
w.add_string('clip.projector_type', 'ultravox')
w.add_bool('clip.has_text_encoder', False)
w.add_bool('clip.has_vision_encoder', False)
w.add_bool('clip.has_audio_encoder', True)
w.add_bool('clip.has_llava_projector', False)
w.add_uint32('clip.audio.num_mel_bins', N_MEL)
w.add_uint32('clip.audio.embedding_length', D)
w.add_uint32('clip.audio.feed_forward_length', FF)
w.add_uint32('clip.audio.projection_dim', n_embd_llm)
w.add_uint32('clip.audio.block_count', 1)
w.add_uint32('clip.audio.attention.head_count', HEADS)
w.add_float32('clip.audio.attention.layer_norm_epsilon', 1e-5)
w.add_uint32('clip.audio.projector.stack_factor', STACK)

# conv weights are numpy (out, in, kernel) = ggml [kernel, in, out]; biases (out, 1) = ggml [1, out]
c1 = np.zeros((D, N_MEL, 3), f32)
c1[0, :, 1] = band           # channel 0: +d  (low minus high)
c1[1, :, 1] = -band          # channel 1: -d  (high minus low)
w.add_tensor('a.conv1d.1.weight', c1.astype(np.float16))
w.add_tensor('a.conv1d.1.bias', np.zeros((D, 1), f32))
c2 = np.zeros((D, D, 3), f32)
c2[0, 0, 1] = c2[1, 1, 1] = 1.0
w.add_tensor('a.conv1d.2.weight', c2.astype(np.float16))
w.add_tensor('a.conv1d.2.bias', np.zeros((D, 1), f32))
w.add_tensor('a.position_embd.weight', np.zeros((N_POS, D), f32))
b = 'a.blk.0.'
for n in ('attn_q', 'attn_k', 'attn_v', 'attn_out'):
    w.add_tensor(b + n + '.weight', np.zeros((D, D), f32))
    if n != 'attn_k':        # whisper has no k bias (the graph asserts it)
        w.add_tensor(b + n + '.bias', np.zeros(D, f32))
w.add_tensor(b + 'ffn_up.weight', np.zeros((FF, D), f32)); w.add_tensor(b + 'ffn_up.bias', np.zeros(FF, f32))
w.add_tensor(b + 'ffn_down.weight', np.zeros((D, FF), f32)); w.add_tensor(b + 'ffn_down.bias', np.zeros(D, f32))
for n in ('ln1', 'ln2'):
    w.add_tensor(b + n + '.weight', np.ones(D, f32)); w.add_tensor(b + n + '.bias', np.zeros(D, f32))

# ultravox projector: rms_norm * pre -> mlp.1 (D*STACK -> 2*H) -> swiglu -> rms_norm * mid -> mlp.2
H = 2
w.add_tensor('mm.a.norm_pre.weight', np.ones(D * STACK, f32))
m1 = np.zeros((2 * H, D * STACK), f32)
for s in range(STACK):       # the stacked vector is STACK frames of D, frame-major
    for h in range(H):
        m1[h, s * D + h] = 1.0        # first half: the value
        m1[H + h, s * D + h] = 1.0    # second half: the gate (silu), the same sum
w.add_tensor('mm.a.mlp.1.weight', m1)
# Gemma scales token embeddings by sqrt(n_embd) inside the model, but not projected ones
scale = np.sqrt(n_embd_llm) if arch.startswith('gemma') else 1.0
w.add_tensor('mm.a.norm_mid.weight', np.full(H, scale / np.sqrt(H), f32))
w.add_tensor('mm.a.mlp.2.weight', np.ascontiguousarray(rows.T.astype(f32)))   # (n_embd_llm, H)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
os.replace(part_path, out_path)
print('wrote', out_path, os.path.getsize(out_path), 'bytes')
