/* gemma3n.c: placeholder until the gemma3n forward lands (issue 3). */
#include "model/model.h"

static gemmac_status not_yet(gm_error *err) {
    return gm_fail(err, GEMMAC_ERR_UNSUPPORTED, "architecture gemma3n is not implemented yet");
}
static gemmac_status hp_gguf(gm_hparams *hp, const gm_gguf *g, gm_error *err) { (void)hp; (void)g; return not_yet(err); }
static gemmac_status hp_hf(gm_hparams *hp, const struct gm_hf_config *c, gm_error *err) { (void)hp; (void)c; return not_yet(err); }
static gemmac_status manifest(const gm_hparams *hp, gm_weights *w, gm_spec_fn fn, void *ud, gm_error *err) {
    (void)hp; (void)w; (void)fn; (void)ud; return not_yet(err);
}
static gemmac_status forward(const gm_forward_args *a, gm_error *err) { (void)a; return not_yet(err); }
static const char *const hf_types[] = {"gemma3n_text", "gemma3n", NULL};
const gm_arch_impl gm_arch_gemma3n = {.name = "gemma3n", .hf_model_types = hf_types, .hparams_gguf = hp_gguf,
                                  .hparams_hf = hp_hf, .manifest = manifest, .forward = forward};
