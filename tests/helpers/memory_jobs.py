"""Peak memory of the probe on a tiny GPT-2 at several sub-batch sizes, each in a fresh forked process.

``python -m tests.helpers.memory_jobs``: imports torch and the probe once (no tensor work, so no thread pool
for the children to inherit), then forks one child per case. ``base`` builds the model and the
batch and stops; the others also probe the batch of 16 sequences in sub-batches of 16, 4 or 1.
Each reports its peak resident memory (``ru_maxrss``, KiB; a forked child's high-water mark starts
at the parent's resident size, the same for all). Printed as one JSON line.
"""

from __future__ import annotations

import json
import os
import resource

import torch

from common.models.gpt import GPT, GPTConfig
from common.science.probe import probe_activation_gradients
from common.training.epoch import classification_loss

BATCH, LENGTH = 16, 256


def peak_kib(sub_batch: int | None) -> int:
    """Build the model and the batch; probe unless ``sub_batch`` is None; the process's peak RSS."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=4, n_embd=64, n_head=4, block_size=LENGTH, vocab_size=257)).eval()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randint(0, 257, (BATCH, LENGTH), generator=g), torch.randint(0, 257, (BATCH, LENGTH), generator=g)
    if sub_batch is not None:
        probe_activation_gradients(model, [(x, y)], loss_fn=classification_loss, sub_batch=sub_batch)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def in_child(sub_batch: int | None) -> int:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            os.write(write, str(peak_kib(sub_batch)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as handle:
        text = handle.read()
    _, status = os.waitpid(pid, 0)
    if not text or status != 0:
        raise RuntimeError(f"the child for sub-batch {sub_batch} failed (status {status})")
    return int(text)


if __name__ == "__main__":
    print(json.dumps({"base": in_child(None), **{str(s): in_child(s) for s in (BATCH, 4, 1)}}))
