#!/usr/bin/env python3
"""make_hf_tokenizer_fixtures.py: Hugging Face tokenizer.json fixtures for src/tok/tokenizer_json.c, with
reference ids computed by HF `tokenizers` itself (tests/unit/test_tokenizer_json.c checks them).

Writes:
  gemma3_hf_tokenizer.json  a small Gemma-3-style tokenizer.json, shaped as transformers writes Gemma 3's:
                            model BPE (byte_fallback, unk <unk>, fuse_unk), normalizer Replace(" ", "▁"),
                            pre_tokenizer Split(" ", merged_with_previous) (a no-op after the normalizer),
                            decoder Replace/ByteFallback/Fuse, post_processor "<bos> $A", added tokens at
                            Gemma's ids (<pad> <eos> <bos> <unk> 0-3, <unusedN>, <start_of_turn> 105,
                            <end_of_turn> 106 special; "\\n\\n", <table>, "<|im>" not special), byte tokens
                            <0x00>.. at 238.., then a vocabulary trained by `tokenizers` on Python's standard
                            library and a few multilingual lines.
                            The merges are what transformers' SentencePiece extractor writes for a
                            SentencePiece BPE model: every split of every piece into two pieces, in the
                            pieces' order. With them, HF's merge-by-rank equals sentencepiece's merge-by-score,
                            which is what gemmac runs for Gemma 3 (scores derived from the merge ranks); this
                            script checks that equivalence with a Python sentencepiece-style merger.
  gemma3_hf_tokenizer.tsv   expected ids for ~110 texts x 4 flag combinations (as gemma4_tokenizer.tsv:
                            hex(text), flags 1=add_bos 2=parse_special, ids, hex(pieces)); add_bos rows are
                            HF's encode(add_special_tokens=True) (the post_processor's <bos>).
  hf_tiny_tokenizer.json    a Gemma-3-style tokenizer of 400 tokens (fits the 512-row tiny HF models of
                            tests/golden/hf) for loading a model directory with its tokenizer.

The Gemma 4 tokenizer.json fixture is tests/golden/gemma4_tokenizer.json (make_gemma4_tokenizer.py); its
reference ids are gemma4_tokenizer.tsv, computed by `tokenizers` from that file (add_bos rows = [2] + HF,
since Gemma 4 always adds BOS), which test_tokenizer_json.c reuses.

Invalid UTF-8 cannot be given to HF, so the Gemma 3 texts are valid UTF-8 (llama.cpp's handling of invalid
bytes is checked on the real GGUF in test_tokenizer.c; the algorithm is the same).

Usage: python3 tests/golden/make_hf_tokenizer_fixtures.py   (deterministic; a few seconds)
"""
import glob
import json
import os
import random
import sys
import sysconfig

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # deterministic training

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
SP = "\u2581"

CONTROL = {0: "<pad>", 1: "<eos>", 2: "<bos>", 3: "<unk>", 4: "<mask>", 105: "<start_of_turn>",
           106: "<end_of_turn>"}
USER = {107: "\n\n", 108: "<table>", 109: "<|im>"}
BYTE0 = 238


def fixed_prefix(byte0, n_fixed):
    toks, kinds = [], []
    unused = 0
    for i in range(n_fixed):
        if i in CONTROL:
            toks.append(CONTROL[i]); kinds.append("control")
        elif i in USER:
            toks.append(USER[i]); kinds.append("user")
        elif i >= byte0:
            toks.append("<0x%02X>" % (i - byte0)); kinds.append("byte")
        else:
            toks.append("<unused%d>" % unused); kinds.append("control"); unused += 1
    return toks, kinds


MULTI = [
    "Le mod\u00e8le r\u00e9pond \u00e0 la question en fran\u00e7ais, tr\u00e8s rapidement.",
    "\u00dcber die Stra\u00dfe gehen die M\u00e4dchen und die Jungen sch\u00f6n langsam.",
    "El ni\u00f1o come una manzana y bebe caf\u00e9 con leche en la ma\u00f1ana.",
    "\u4eca\u5929\u5929\u6c14\u5f88\u597d\uff0c\u6211\u4eec\u53bb\u516c\u56ed\u6563\u6b65\u5427\u3002",
    "\u65e5\u672c\u8a9e\u306e\u6587\u7ae0\u3092\u66f8\u304d\u307e\u3059\u3002",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043a\u0430\u043a \u0434\u0435\u043b\u0430? \u042d\u0442\u043e \u0442\u0435\u0441\u0442.",
]


def corpus_lines(small):
    lib = sysconfig.get_paths()["stdlib"]
    lines = []
    for path in sorted(glob.glob(os.path.join(lib, "*.py")))[:(4 if small else 60)]:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.isascii():
                    lines.append(line.rstrip("\n"))
    return lines if small else lines + MULTI * 40


def train(n_learned, small):
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    tok.normalizer = normalizers.Replace(" ", SP)
    trainer = trainers.BpeTrainer(vocab_size=n_learned, special_tokens=[], show_progress=False, min_frequency=2,
                                  max_token_length=16)
    tok.train_from_iterator(corpus_lines(small), trainer=trainer)
    model = json.loads(tok.to_str())["model"]
    return [t for t, _ in sorted(model["vocab"].items(), key=lambda kv: kv[1])]


def all_split_merges(toks, kinds):
    """transformers' SentencePieceExtractor: for every piece (in id order = score order), every split into two
    pieces of the vocabulary, ordered within the piece by the halves' ids."""
    vocab = {t: i for i, t in enumerate(toks)}
    merges = []
    for i, t in enumerate(toks):
        if kinds[i] != "normal" or len(t) < 2:
            continue
        local = [(t[:k], t[k:]) for k in range(1, len(t)) if t[:k] in vocab and t[k:] in vocab
                 and kinds[vocab[t[:k]]] == "normal" and kinds[vocab[t[k:]]] == "normal"]
        local.sort(key=lambda m: (vocab[m[0]], vocab[m[1]]))
        merges += local
    return merges


def build(n_learned, n_fixed, byte0, small=False):
    toks, kinds = fixed_prefix(byte0, n_fixed)
    seen = set(toks)
    for t in train(n_learned, small):
        if t not in seen:
            toks.append(t); kinds.append("normal"); seen.add(t)
    merges = all_split_merges(toks, kinds)
    vocab = {t: i for i, t in enumerate(toks)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", SP)
    tok.pre_tokenizer = pre_tokenizers.Split(" ", "merged_with_previous")
    tok.decoder = decoders.Sequence([decoders.Replace(SP, " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 2)])
    tok.add_tokens([AddedToken(toks[i], special=(k == "control"), normalized=False)
                    for i, k in enumerate(kinds) if k in ("control", "user")])
    for i, t in enumerate(toks):
        assert tok.token_to_id(t) == i, (i, t)
    return tok, toks, kinds, merges


def spm_reference(toks, kinds, merges, text):
    """sentencepiece's BPE merge loop over one normalized fragment: merge the adjacent pair whose concatenation
    has the best score (score = -(1 + rank of the first merge making it)), leftmost first; pieces that are not
    tokens become byte tokens."""
    vocab = {t: i for i, t in enumerate(toks)}
    score = {}
    for r, (a, b) in enumerate(merges):
        score.setdefault(a + b, -(r + 1))
    syms = list(text)
    while True:
        best = None
        for i in range(len(syms) - 1):
            s = score.get(syms[i] + syms[i + 1])
            if s is not None and (best is None or s > best[0]):
                best = (s, i)
        if best is None:
            break
        i = best[1]
        syms[i:i + 2] = [syms[i] + syms[i + 1]]
    out = []
    for s in syms:
        if s in vocab:
            out.append(vocab[s])
        else:
            out += [BYTE0 + b for b in s.encode()]
    return out


def piece(toks, kinds, i):
    k = kinds[i]
    if k in ("control", "unknown"):
        return b""
    if k == "user":
        return toks[i].encode()
    if k == "byte":
        return bytes([int(toks[i][3:5], 16)])
    return toks[i].replace(SP, " ").encode()


TEXTS = [
    "", "Hello world", "Hello, world! How are you today?", "The quick brown fox jumps over the lazy dog.",
    " leading space", "trailing space ", "   three leading and two trailing  ", " ", "  ", "a  b   c    d",
    "\t", "tab\tseparated\t\tvalues", "\n", "\n\n", "\n\n\n", "\n\n\n\n\n", "x\n\ny", "line one\nline two\n\nline four",
    "\r\nwindows\r\nline endings\r\n", "def add(a, b):\n    return a + b\n\nprint(add(1, 2))\n",
    "import os\nimport sys\n\n\nclass Foo(object):\n    pass\n",
    "for (int i = 0; i < n; ++i) { sum += x[i] * y[i]; }", "if __name__ == '__main__':\n    main()\n",
    "    self.assertEqual(result, expected)", "return None", "raise ValueError('bad value: %r' % (value,))",
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00fcber stra\u00dfe fa\u00e7ade", "\u00c0 la mani\u00e8re de Ren\u00e9",
    "Le mod\u00e8le r\u00e9pond \u00e0 la question", "El ni\u00f1o come una manzana",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002", "\u4eca\u5929\u5929\u6c14\u5f88\u597d\u3002",
    "\u4e2d\u6587\u5206\u8bcd\u6d4b\u8bd5\uff0c\u4f60\u597d\u4e16\u754c", "\ud55c\uad6d\uc5b4 \ud14c\uc2a4\ud2b8",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!", "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
    "emoji \U0001f600\U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467 \u2764\ufe0f",
    "rare \U0001d54f\U0001d552\U0001d55c \U00010348 \U0001f9ec", "\U0001f680\U0001f680\U0001f680",
    "1234567890 3.14159 -42 1e-9 0x1F 100,000,000", "2024-01-15T12:34:56Z",
    "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n",
    "<bos><start_of_turn>user\nhi<end_of_turn>\n", "<bos>", "<eos>", "<pad><unk><mask>", "text<end_of_turn>more",
    "<unused0> <unused42> <unused7>", "<start_of_turn", "<start_of_turn><start_of_turn>", "<<bos>>",
    "<table><tr><td>cell</td></tr></table>", "<|im> and <|im", "a\n\nb\n\n\nc", "<0x41> is not a byte token in text",
    SP + " literal lower one eighth block " + SP + SP, "a" * 300, " " * 40, "\n" * 9, "\t" * 20, "x \n \t y \t\n z",
    "!!!???...,,,;;;:::", "@user #hashtag https://example.com/path?q=1&r=2", "\"quoted\" 'single' `back`",
    "nul\x00inside", "\x00", "\u00ff\u00fe\u00fd", "\ufffd replacement", "\u200b zero width", "ﬁ ligature",
    "Gemma is a family of lightweight, state-of-the-art open models.\n\n```python\nimport numpy as np\n```\n",
]


def random_texts(n, seed):
    rng = random.Random(seed)
    atoms = [" ", "  ", "\n", "\n\n", "\t", "a", "b", "the", "ing", "self", "return", "<", ">", "/", "<bos>",
             "<start_of_turn>", "<end_of_turn>", "<table>", "<|im>", "<unused1", "0", "7", ".", "\u00e9", "\u4e2d",
             "\U0001f600", SP, "\r", "def ", "(", ")"]
    return ["".join(rng.choice(atoms) for _ in range(rng.randint(1, 24))) for _ in range(n)]


def write_tsv(path, header, tok, toks, kinds, texts):
    lines = list(header)
    for text in texts:
        for flags in (0, 1, 2, 3):
            tok.encode_special_tokens = not (flags & 2)
            ids = tok.encode(text, add_special_tokens=bool(flags & 1)).ids
            det = b"".join(piece(toks, kinds, i) for i in ids)
            lines.append("%s\t%d\t%s\t%s" % (text.encode().hex(), flags, ",".join(map(str, ids)) or "-", det.hex()))
            # our pieces agree with HF's decoder (special tokens skipped) wherever the text is whole UTF-8
            try:
                whole = det.decode("utf-8")
            except UnicodeDecodeError:
                whole = None
            if whole is not None:
                assert tok.decode(ids, skip_special_tokens=True) == whole, (text, ids)
    tok.encode_special_tokens = False
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return len(lines) - len(header)


def main():
    tok, toks, kinds, merges = build(n_learned=2200, n_fixed=BYTE0 + 256, byte0=BYTE0)
    # the merge-by-rank / merge-by-score equivalence gemmac relies on, fragment by fragment
    texts = TEXTS + random_texts(40, 7)
    bad = 0
    for text in texts:
        norm = text.replace(" ", SP)
        want = [t.id for t in tok.model.tokenize(norm)] if norm else []
        got = spm_reference(toks, kinds, merges, norm)
        if want != got:
            bad += 1
            print("score/rank mismatch:", repr(text), want, got, file=sys.stderr)
    assert bad == 0

    tok.save(os.path.join(HERE, "gemma3_hf_tokenizer.json"))
    n = write_tsv(os.path.join(HERE, "gemma3_hf_tokenizer.tsv"),
                  ["# Gemma-3-style tokenizer.json reference from HF tokenizers %s (gemma3_hf_tokenizer.json)"
                   % __import__("tokenizers").__version__,
                   "# %d tokens, %d merges (every split of every piece); add_bos rows: HF's post_processor <bos>"
                   % (len(toks), len(merges)),
                   "# hex(text)\tflags(1=add_bos,2=parse_special)\tids\thex(pieces)"], tok, toks, kinds, texts)

    # a tokenizer for the tiny HF model directories (vocab_size 512): 110 fixed + 256 bytes + learned
    tiny, ttoks, _, tmerges = build(n_learned=140, n_fixed=110 + 256, byte0=110, small=True)
    assert len(ttoks) <= 512 and ttoks[106] == "<end_of_turn>"
    tiny.save(os.path.join(HERE, "hf_tiny_tokenizer.json"))
    print("gemma3-style: %d tokens, %d merges, %d cases; tiny: %d tokens, %d merges"
          % (len(toks), len(merges), n, len(ttoks), len(tmerges)))
    for f in ("gemma3_hf_tokenizer.json", "gemma3_hf_tokenizer.tsv", "hf_tiny_tokenizer.json"):
        print("  %s: %d bytes" % (f, os.path.getsize(os.path.join(HERE, f))))


if __name__ == "__main__":
    sys.exit(main())
