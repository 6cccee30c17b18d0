"""What several job modules share, below all of them.

- :mod:`common.experiments.shared.resnet_sweep`: the ResNet depth sweep's run configs, the data they name and its
  job function (01 trains it; 03 and 09 train through it);
- :mod:`common.experiments.shared.resnet_sweep_records`: the records API that 02, 03, 06, 07 and 09 read the sweep's
  finished runs through;
- :mod:`common.experiments.shared.decoder_runs`: what the two decoder experiments (04, 05) share;
- :mod:`common.experiments.shared.gpt2_runs`: 05's runs as models (05 and 10 read them).
"""
