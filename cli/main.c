/* main.c: the gemmac command: dispatches to one command per file (run, chat, info, bench, logits). */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: gemmac COMMAND [options]\n"
            "\n"
            "commands:\n"
            "  run     generate text from a prompt          gemmac run -p \"Once upon a time\" -n 64\n"
            "  chat    interactive chat with the model's template\n"
            "  info    hyper-parameters, tensors, tokenizer, memory plan\n"
            "  bench   prefill and decode speed (like llama-bench)\n"
            "  logits  write the logits of every position of a token list\n"
            "  serve   OpenAI-compatible HTTP server with continuous batching (gemmac serve --help)\n"
            "  synth   a GGUF with random weights of a released size   gemmac synth --preset gemma3-270m --type q4_0 -o F\n"
            "  convert a Hugging Face checkpoint directory to GGUF      gemmac convert DIR -o F [--type f32]\n"
            "\n"
            "common options (llama.cpp's names):\n"
            "  -m PATH            model: a .gguf file or a Hugging Face directory; default: $GEMMAC_MODEL, then the installed Gemma 3 270M\n"
            "  -c N               context size (default: the model's, at most 4096)\n"
            "  -t N               threads (default: all cores)\n"
            "  -b N               batch size for prompt processing (default 512)\n"
            "  -ctk/-ctv TYPE     KV cache type: f16 (default), f32 or q8_0 (both the same; q8_0: head dims multiple of 32)\n"
            "  -ngl N|all         layers on the GPU (CUDA builds): 0 (default) = CPU, all = everything\n"
            "run / chat options:\n"
            "  -p TEXT / -f FILE  prompt\n"
            "  -n N               tokens to generate (-1: until end of generation)\n"
            "  --chat             wrap the prompt in the model's chat template (run)\n"
            "  --system TEXT      system message (chat, run --chat)\n"
            "  --temp T (0.8) --top-k K (40) --top-p P (0.95) --min-p M (0.05)\n"
            "  --repeat-penalty R (1.0) --repeat-last-n N (64) --presence-penalty P (0) --frequency-penalty F (0)\n"
            "  -s SEED            sampling seed (default: random)\n"
            "  --ignore-eos       keep generating past the end-of-generation token\n"
            "  --tokens 2,651,..  use these token ids as the prompt (no tokenizer)\n"
            "  --ids              print only the generated token ids, space-separated\n"
            "bench options:\n"
            "  -p 512 -n 128 -r 5 (lists allowed: -p 128,512)   -d N: start each test with N positions cached\n"
            "  -npl 1,8,64,256    batched decoding: that many sequences advance together for -n steps;\n"
            "                     aggregate tokens/s and GB/s read (weights + KV) against the copy bandwidth\n"
            "  --full-logits      decoding steps copy whole rows of logits (as llama.cpp's benchmarks do), not\n"
            "                     each row's best 256 (what run / chat / serve ask for with default sampling)\n"
            "logits options:\n"
            "  --tokens 2,651,.. --out FILE   float32 little-endian, n_tokens rows x n_vocab\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "run")) return cmd_run(argc, argv);
    if (!strcmp(cmd, "chat")) return cmd_chat(argc, argv);
    if (!strcmp(cmd, "info")) return cmd_info(argc, argv);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc, argv);
    if (!strcmp(cmd, "logits")) return cmd_logits(argc, argv);
    if (!strcmp(cmd, "serve")) return cmd_serve(argc, argv);
    if (!strcmp(cmd, "synth")) return cmd_synth(argc, argv);
    if (!strcmp(cmd, "convert")) return cmd_convert(argc, argv);
    fprintf(stderr, "gemmac: unknown command '%s' (try gemmac --help)\n", cmd);
    return 2;
}
