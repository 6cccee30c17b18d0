"""Training: the loop and what it runs on (docs/design.md, section "Runs, records and launching").

- :mod:`common.training.loop`: one run's resumable training loop, its rounds (checkpoint every epoch, atomic writes);
- :mod:`common.training.epoch`: one pass of optimizer steps and the loss it minimises; the non-finite-loss check;
- :mod:`common.training.evaluation`: the per-round evaluations and the final float32 ones;
- :mod:`common.training.checkpoints`: resuming a run from its checkpoint, its final weights, finishing it;
- :mod:`common.training.growing`: a model growing inside a run (fixed insertion plans, 03; a controller, 09);
- :mod:`common.training.recipes`: optimisers and learning-rate schedules; :mod:`common.training.losses`;
- :mod:`common.training.flops`: the one FLOP counter (training FLOPs from PyTorch's counter);
- :mod:`common.training.device`, :mod:`common.training.distributed`, :mod:`common.training.parallel` (DDP/FSDP
  wrapping), :mod:`common.training.compile` (regional ``torch.compile``), :mod:`common.training.memory` (a decoder's
  peak memory and whether it needs activation checkpointing).

Imports the science, models, data and runs; never the launcher, the report or a job module.
"""
