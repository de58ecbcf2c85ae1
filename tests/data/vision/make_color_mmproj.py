"""Build a tiny, hand-wired gemma3-type mmproj for a given text GGUF.

The 'vision tower' computes each patch's mean R, G, B (patch conv), passes it through one
transformer block whose attention/FFN outputs are zero (residual only), avg-pools 4x4 patches (an
image is 16 tokens), RMS-norms, and projects channel c onto the LLM's own embedding of a colour
word (" red", " green", " blue").
So a pure red image becomes N copies of the embedding of " red": a deterministic, meaningful
projector that needs no trained weights.
usage: make_color_mmproj.py TEXT_MODEL.gguf OUT.gguf
Only the three rows of the embedding table are dequantised (the whole table of a 150k-token
vocabulary is half a gigabyte of floats), and OUT is written beside itself and renamed into place,
so that builders running at once (parallel tests) never see half a file.
"""
import os, sys, numpy as np, gguf
from gguf.quants import dequantize

text_path, out_path = sys.argv[1], sys.argv[2]
r = gguf.GGUFReader(text_path)
arch = r.fields['general.architecture'].contents()
n_embd_llm = int(r.fields[f'{arch}.embedding_length'].contents())
tokens = r.fields['tokenizer.ggml.tokens'].contents()
emb = [t for t in r.tensors if t.name == 'token_embd.weight'][0]
words = []
for w in ['red', 'green', 'blue']:
    for cand in ('\u0120' + w, '\u2581' + w, w):  # GPT-2 BPE space, SentencePiece space, bare
        if cand in tokens:
            words.append(tokens.index(cand)); break
    else:
        sys.exit(f'no token for {w}')
print('colour token ids', words, [tokens[i] for i in words])
# emb.data is one row per token (quantised rows are whole blocks): dequantise only the three.
rows = dequantize(np.asarray(emb.data[words]), emb.tensor_type).reshape(len(words), n_embd_llm)

# Every image is resized to IMG x IMG: (128/8)/4 = 4 -> 4x4 = 16 tokens. With 64 (4 tokens) the
# default model told red, green and blue apart when the question came before the image, but
# answered "Red" for a green image put before the question; with 16 tokens it tells them apart
# in either order (so did 256; scaling the projection by 1.5 or 2 did not help at 64).
D, P, IMG, HEADS, FF = 32, 8, 128, 2, 64   # vision width, patch, image side, heads, ffn
f32 = np.float32
part_path = f'{out_path}.{os.getpid()}.part'
w = gguf.GGUFWriter(part_path, 'clip')
w.add_string('clip.projector_type', 'gemma3')
w.add_bool('clip.has_text_encoder', False)
w.add_bool('clip.has_vision_encoder', True)
w.add_bool('clip.has_llava_projector', False)
w.add_uint32('clip.vision.image_size', IMG)
w.add_uint32('clip.vision.patch_size', P)
w.add_uint32('clip.vision.embedding_length', D)
w.add_uint32('clip.vision.feed_forward_length', FF)
w.add_uint32('clip.vision.projection_dim', n_embd_llm)
w.add_uint32('clip.vision.block_count', 1)
w.add_uint32('clip.vision.attention.head_count', HEADS)
w.add_float32('clip.vision.attention.layer_norm_epsilon', 1e-6)
w.add_array('clip.vision.image_mean', [0.0, 0.0, 0.0])
w.add_array('clip.vision.image_std', [1.0, 1.0, 1.0])
w.add_bool('clip.use_gelu', True)
w.add_uint32('clip.vision.projector.scale_factor', 4)   # avg-pool 4x4 patches into one token

pe = np.zeros((D, 3, P, P), f32)
for c in range(3):
    pe[c, c] = 1.0 / (P * P)                     # dim c = mean of channel c over the patch
w.add_tensor('v.patch_embd.weight', pe)
w.add_tensor('v.patch_embd.bias', np.zeros(D, f32))
w.add_tensor('v.position_embd.weight', np.zeros(((IMG // P) ** 2, D), f32))
b = 'v.blk.0.'
for n in ('attn_q', 'attn_k', 'attn_v', 'attn_out'):
    w.add_tensor(b + n + '.weight', np.zeros((D, D), f32)); w.add_tensor(b + n + '.bias', np.zeros(D, f32))
w.add_tensor(b + 'ffn_up.weight', np.zeros((FF, D), f32)); w.add_tensor(b + 'ffn_up.bias', np.zeros(FF, f32))
w.add_tensor(b + 'ffn_down.weight', np.zeros((D, FF), f32)); w.add_tensor(b + 'ffn_down.bias', np.zeros(D, f32))
for n in ('ln1', 'ln2'):
    w.add_tensor(b + n + '.weight', np.ones(D, f32)); w.add_tensor(b + n + '.bias', np.zeros(D, f32))
# rms_norm of one-hot [1,0,...] is sqrt(D) on that dim: scale back to 1
# Gemma scales token embeddings by sqrt(n_embd) inside the model, but not raw input embeddings
scale = np.sqrt(n_embd_llm) if arch.startswith('gemma') else 1.0
w.add_tensor('mm.soft_emb_norm.weight', np.full(D, scale / np.sqrt(D), f32))
proj = np.zeros((D, n_embd_llm), f32)
proj[:len(words)] = rows
w.add_tensor('mm.input_projection.weight', proj)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
os.replace(part_path, out_path)
print('wrote', out_path)
