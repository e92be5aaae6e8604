#!/usr/bin/env python3
"""make_gemma4_tokenizer.py: a small Gemma-4-style tokenizer and its reference ids, from HF `tokenizers`.

Trains a BPE with the shape of Gemma 4's tokenizer (byte_fallback, " " → "▁" normalizer, pre-split into
runs of newlines and runs of everything else, merges over UTF-8 characters) on text from Python's own
standard library plus a few generated multilingual sentences, lays the vocabulary out with Gemma 4's
special ids, and writes:

  gemma4_tokenizer.json   the HF tokenizer (the reference)
  gemma4_vocab.gguf       the same vocabulary as llama.cpp's converter writes it for gemma4 (vocab only,
                          general.architecture "gemma4", tokenizer.ggml.model "gemma4", no tensors)
  gemma4_tokenizer.tsv    expected ids for a fixed text set (same format as gemma3_tokenizer.tsv)

How the two sides are made to mean the same thing (what tests/unit/test_tokenizer.c relies on):
  * HF special added tokens (special=True)   ↔ GGUF CONTROL: matched only with parse_special.
  * HF non-special added tokens (<|channel>, <|"|>, …) ↔ GGUF USER_DEFINED: matched in both modes.
    <|tool_response> is special here because llama.cpp turns it into a control token (it is an EOG text).
  * Newline runs "\n" × 1..31 (ids 107..137) are HF non-special added tokens but NORMAL in the GGUF, as
    LlamaHfVocab writes base-vocabulary added tokens; llama.cpp emits a newline run that is a token whole
    (PR 21343), which agrees with HF for runs of at most 31 newlines (longer runs differ; not tested).
  * parse_special=False is HF's `encode_special_tokens = True`.
  * HF adds no BOS (no post-processor, like Gemma 4's add_bos_token=False); llama.cpp always adds one for
    gemma4, so the add_bos rows expect [2] + HF's ids.
  * Invalid UTF-8 cannot be given to HF; llama.cpp decodes such text to code points first (an invalid byte
    becomes U+FFFD, overlongs decode). Those rows give HF the string llama.cpp's decoder yields.
  * The detok column is llama.cpp's token_to_piece(special=False) rule written here in Python: control →
    "", user-defined → its text, normal → "▁" as " ", byte → the byte.

Usage: python3 tests/golden/make_gemma4_tokenizer.py   (deterministic; takes ~10 s)
"""
import glob
import os
import sys
import sysconfig

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # deterministic training

import gguf
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
N_LEARNED = 5200  # alphabet + merges learned by the trainer

# ---- Gemma 4 special ids (gemma-architecture.md §3.1) -------------------------------------------------
CONTROL = {0: "<pad>", 1: "<eos>", 2: "<bos>", 3: "<unk>", 4: "<mask>", 46: "<|tool>", 47: "<tool|>",
           98: "<|think|>", 105: "<|turn>", 106: "<turn|>", 50: "<|tool_response>"}
USER = {48: "<|tool_call>", 49: "<tool_call|>", 51: "<tool_response|>", 52: '<|"|>', 100: "<|channel>",
        101: "<channel|>"}
NEWLINES = {107 + k: "\n" * (k + 1) for k in range(31)}  # 107..137
BYTE0 = 238                                              # <0x00> .. <0xFF> = 238 .. 493
N_FIXED = BYTE0 + 256


def fixed_prefix():
    toks, kinds = [], []
    unused = 0
    for i in range(N_FIXED):
        if i in CONTROL:
            toks.append(CONTROL[i]); kinds.append("control")
        elif i in USER:
            toks.append(USER[i]); kinds.append("user")
        elif i in NEWLINES:
            toks.append(NEWLINES[i]); kinds.append("newline")
        elif i >= BYTE0:
            toks.append("<0x%02X>" % (i - BYTE0)); kinds.append("byte")
        else:
            toks.append("<unused%d>" % unused); kinds.append("control"); unused += 1
    return toks, kinds


# ---- training corpus ------------------------------------------------------------------------------------
MULTI = [
    "Le mod\u00e8le r\u00e9pond \u00e0 la question en fran\u00e7ais, tr\u00e8s rapidement.",
    "\u00dcber die Stra\u00dfe gehen die M\u00e4dchen und die Jungen sch\u00f6n langsam.",
    "El ni\u00f1o come una manzana y bebe caf\u00e9 con leche en la ma\u00f1ana.",
    "\u4eca\u5929\u5929\u6c14\u5f88\u597d\uff0c\u6211\u4eec\u53bb\u516c\u56ed\u6563\u6b65\u5427\u3002\u4e2d\u6587\u6d4b\u8bd5\u3002",
    "\u65e5\u672c\u8a9e\u306e\u6587\u7ae0\u3092\u66f8\u304d\u307e\u3059\u3002\u3053\u308c\u306f\u30c6\u30b9\u30c8\u3067\u3059\u3002",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043a\u0430\u043a \u0434\u0435\u043b\u0430? \u042d\u0442\u043e \u0442\u0435\u0441\u0442.",
]


def corpus_lines():
    lib = sysconfig.get_paths()["stdlib"]
    lines = []
    for path in sorted(glob.glob(os.path.join(lib, "*.py")))[:120]:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.isascii():
                    lines.append(line)
    lines += [s + "\n" for s in MULTI] * 40
    return lines


def chunks(lines, n=200):
    for i in range(0, len(lines), n):
        yield "".join(lines[i:i + n])


def shape(tok):
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("[^\n]+|[\n]+"), behavior="isolated")
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])


def train():
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    shape(tok)
    trainer = trainers.BpeTrainer(vocab_size=N_LEARNED, special_tokens=[], show_progress=False,
                                  min_frequency=2)
    tok.train_from_iterator(chunks(corpus_lines()), trainer=trainer)
    import json
    model = json.loads(tok.to_str())["model"]
    learned = sorted(model["vocab"].items(), key=lambda kv: kv[1])
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1)) for m in model["merges"]]
    return [t for t, _ in learned], merges


def build():
    toks, kinds = fixed_prefix()
    learned, merges = train()
    seen = set(toks)
    for t in learned:
        if t not in seen:
            toks.append(t); kinds.append("normal"); seen.add(t)
    vocab = {t: i for i, t in enumerate(toks)}
    for a, b in merges:
        assert a in vocab and b in vocab and a + b in vocab, (a, b)
        assert " " not in a and " " not in b
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=True, unk_token="<unk>"))
    shape(tok)
    added = []
    for i, k in enumerate(kinds):
        if k in ("control", "user", "newline"):
            added.append(AddedToken(toks[i], special=(k == "control"), normalized=False))
    tok.add_tokens(added)
    for i, k in enumerate(kinds):
        assert tok.token_to_id(toks[i]) == i, (i, toks[i])
    return tok, toks, kinds, merges


def write_gguf(path, toks, kinds, merges):
    ttype = {"control": gguf.TokenType.CONTROL, "user": gguf.TokenType.USER_DEFINED,
             "newline": gguf.TokenType.NORMAL, "byte": gguf.TokenType.BYTE, "normal": gguf.TokenType.NORMAL}
    w = gguf.GGUFWriter(path, arch="gemma4")
    w.add_name("gemmac gemma4-style test vocabulary")
    w.add_tokenizer_model("gemma4")
    w.add_token_list([t.encode() for t in toks])
    w.add_token_scores([-1000.0] * len(toks))  # LlamaHfVocab's score for every token
    w.add_token_types([ttype[k] for k in kinds])
    w.add_token_merges(["%s %s" % m for m in merges])
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_unk_token_id(3)
    w.add_pad_token_id(0)
    w.add_add_space_prefix(False)
    w.add_add_bos_token(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ---- the text set ---------------------------------------------------------------------------------------
TEXTS = [
    b"",
    b"Hello world",
    b"def add(a, b):\n    return a + b\n",
    b"import os\nimport sys\n\n\nclass Foo(object):\n    pass\n",
    b"for (int i = 0; i < n; ++i) { sum += x[i]; }",
    b" leading space",
    b"trailing space ",
    b"  two leading, three trailing   ",
    b" ",
    b"a  b   c    d",
    b"tab\tseparated\t\tvalues\t",
    b"\n",
    b"\n\n",
    b"line one\nline two\n\nline four\n\n\n\nafter four newlines",
    b"\n" * 31,
    b"x" + b"\n" * 12 + b"y",
    b"\r\nwindows\r\nline endings\r\n",
    "Le mod\u00e8le r\u00e9pond \u00e0 la question".encode(),
    "caf\u00e9 na\u00efve \u00fcber stra\u00dfe".encode(),
    "\u4eca\u5929\u5929\u6c14\u5f88\u597d\u3002".encode(),
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30b9\u30c8".encode(),
    "\ud55c\uad6d\uc5b4 \ud14c\uc2a4\ud2b8".encode(),
    "\u0928\u092e\u0938\u094d\u0924\u0947".encode(),
    "emoji \U0001f600\U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467".encode(),
    b"1234567890 3.14159 -42 0x1F",
    b"<|turn>user\nWhat is 2+2?<turn|>\n<|turn>model\n",
    b"<bos><|turn>system\nBe brief.<turn|>\n<|turn>user\nhi<turn|>\n<|turn>model\n",
    b"<|channel>thought\n<channel|>The answer is 4.<turn|>",
    b'<|tool_call>call:search{query:<|"|>cats<|"|>}<tool_call|>',
    b"<|tool_response>response:search{}<tool_response|>",
    b"<|think|> <|tool> <tool|> <mask> <unk> <pad> <eos> <unused3>",
    b"<|turn",
    b"<<|turn>>",
    b"<0x41> in text",
    "\u2581 literal block \u2581\u2581".encode(),
    b"nul\x00inside",
    b"\xff",
    b"bad \xfe\xff lead bytes",
    b"\x80\x81 lone continuations",
    b"truncated \xe6\x97",
    b"overlong \xc0\xaf and \xe0\x80\xaf",
    b"\xf0\x9f\x98",
    b"a" * 300,
    b"!!!???...,,,;;;:::",
    b"https://example.com/path?q=1&r=2 @user #tag",
    (b"The quick brown fox jumps over the lazy dog. " * 5) + b"\n\n" + b"    if x is None:\n        return []\n" * 3,
]


def llama_decode(b):
    """llama.cpp's unicode_cpts_from_utf8 (lead bits only, overlongs accepted, invalid byte → U+FFFD);
    code points above U+10FFFF also become U+FFFD (llama.cpp throws; gemmac substitutes)."""
    out, i, n = [], 0, len(b)
    while i < n:
        c = b[i]
        if c < 0x80:
            out.append(c); i += 1; continue
        need = 1 if (c & 0xE0) == 0xC0 else 2 if (c & 0xF0) == 0xE0 else 3 if (c & 0xF8) == 0xF0 else -1
        if need > 0 and i + need < n and all((b[i + k] & 0xC0) == 0x80 for k in range(1, need + 1)):
            cp = c & (0x1F, 0x0F, 0x07)[need - 1]
            for k in range(1, need + 1):
                cp = (cp << 6) | (b[i + k] & 0x3F)
            out.append(cp if cp <= 0x10FFFF else 0xFFFD)
            i += need + 1
        else:
            out.append(0xFFFD); i += 1
    return "".join(map(chr, out))


def piece(toks, kinds, i):
    k = kinds[i]
    if k == "control":
        return b""
    if k == "user":
        return toks[i].encode()
    if k == "byte":
        return bytes([i - BYTE0])
    return toks[i].replace("\u2581", " ").encode()


def main():
    tok, toks, kinds, merges = build()
    tok.save(os.path.join(HERE, "gemma4_tokenizer.json"))
    gguf_path = os.path.join(HERE, "gemma4_vocab.gguf")
    write_gguf(gguf_path, toks, kinds, merges)

    lines = [
        "# Gemma-4-style tokenizer reference from HF tokenizers %s (gemma4_tokenizer.json, gemma4_vocab.gguf)"
        % __import__("tokenizers").__version__,
        "# %d tokens, %d merges; HF adds no BOS: add_bos rows are [2] + HF ids (llama.cpp forces BOS)"
        % (len(toks), len(merges)),
        "# hex(text)\tflags(1=add_bos,2=parse_special)\tids\thex(pieces)",
    ]
    for text in TEXTS:
        s = llama_decode(text)
        for flags in (0, 1, 2, 3):
            tok.encode_special_tokens = not (flags & 2)
            ids = tok.encode(s, add_special_tokens=False).ids
            if flags & 1:
                ids = [2] + ids
            det = b"".join(piece(toks, kinds, i) for i in ids)
            lines.append("%s\t%d\t%s\t%s" % (text.hex(), flags, ",".join(map(str, ids)) or "-", det.hex()))
    tok.encode_special_tokens = False
    with open(os.path.join(HERE, "gemma4_tokenizer.tsv"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("%d tokens, %d merges, %d cases; gguf %d bytes" % (len(toks), len(merges), len(lines) - 3,
                                                              os.path.getsize(gguf_path)))


if __name__ == "__main__":
    sys.exit(main())
