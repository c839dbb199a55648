/* make train: the Llama-style model of tiny_llama.h trained on the bytes of a text every Debian
 * system ships (the GPL-3 in /usr/share/common-licenses) from a config file (examples/configs/,
 * train_config.h: model, parallelism, activation checkpointing, optimizer and schedule,
 * training, eval, checkpoint, metrics; flags override its keys), on in-process ranks (or one
 * process per rank under a launcher with runtime "ucx") laid out as a named mesh of
 * dp_replicate, dp_shard, pp, cp, tp and ep (README.md, docs/training.md). One progress line
 * per step (loss, tokens/s, step time, fraction of the machine's peak, rank 0's peak tensor
 * memory, collectives), eval losses and checkpoints as configured (resuming from the newest
 * one), then a trace of the last steps (Perfetto / chrome://tracing) and its timeline page.
 *
 *   train [CONFIG.json] [--section.key VALUE ...]     train --help lists every key */
#include "trainer.h"

int main(int argc, char **argv) {
    return tr_main(argc, argv, NULL);
}
