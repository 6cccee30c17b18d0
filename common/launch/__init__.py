"""Starting runs: the command line every script shares and the launcher (docs/runs.md).

- :mod:`common.launch.cli`: the shared flags, presets and overrides, and the one-line error contract;
  :mod:`common.launch.decoder_flags`: the flags of the decoder scripts and of the scripts that train on a device;
- :mod:`common.launch.launcher`: a job function run inline, in a local pool (:mod:`common.launch.local_pool`) or on
  SLURM through submitit (:mod:`common.launch.slurm`), finished runs skipped;
  :mod:`common.launch.submitit_jobs`: a job array submitted, and every failed job read back into one error;
- :mod:`common.launch.gpu_estimates`: ``--dry-run``'s GPU-hours, a launch model on the FLOP counter;
- :mod:`common.launch.logs`: one log format, to stderr.

Job modules never import the launcher (submitit pickles them); the launcher never imports a job module.
"""
