"""Training: the loop and what it runs on (docs/design.md, section "Runs, records and launching").

- :mod:`common.training.loop`: one run's resumable training loop (checkpoint every epoch, atomic writes);
- :mod:`common.training.growing`: a model growing inside a run (fixed insertion plans, 03; a controller, 09);
- :mod:`common.training.recipes`: optimisers and learning-rate schedules; :mod:`common.training.losses`;
- :mod:`common.training.flops`: the one FLOP counter (training FLOPs from PyTorch's counter);
- :mod:`common.training.device`, :mod:`common.training.distributed`, :mod:`common.training.parallel` (DDP/FSDP
  wrapping), :mod:`common.training.compile` (regional ``torch.compile``), :mod:`common.training.memory` (a decoder's
  peak memory and whether it needs activation checkpointing).

Imports the science, models, data and runs; never the launcher, the report or a job module.
"""
