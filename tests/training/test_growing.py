"""The growth engine (common/training/growing.py inside common/training/loop.py): a model that grows inside one training run.

Each insertion preserves the function, keeps every old parameter's optimizer state and gives the new block none,
leaves the learning rate on the run's one schedule (the restart ablation: on its segments), resumes bit-identically
when killed before or just after it, counts the FLOPs of each epoch's depth, and is refused under torch.distributed.
"""

from dataclasses import replace

import pytest
import torch
from torch import nn

from common.data.loader import TensorLoader
from common.data.vision import make_synthetic
from common.errors import UserError
from common.models.resnet import ResNet, ResNetConfig, grow
from common.runs import run_store
from common.science.growth import GrowthBrokeFunction
from common.training import device
from common.training import epoch as epoch_module
from common.training import loop as train_module
from common.training.checkpoints import WEIGHTS, load_weights
from common.training.flops import training_flops_per_image
from common.training.growing import Insertion, RunGrowth, insert
from common.training.loop import train
from common.training.recipes import AdamRecipe, Schedule, SGDRecipe, TrainSettings

DATA = make_synthetic(num_train=64, num_test=32, num_classes=4, image_size=8, seed=0)
KEYS = {"mean": DATA.mean, "std": DATA.std, "channels_last": True}
BATCH = 16  # 4 steps per epoch
SETTINGS = TrainSettings(SGDRecipe(epochs=4, lr=0.05, warmup_epochs=1), channels_last=True)
PLAN = (Insertion(1, 11), Insertion(3, 12))  # a block before epochs 2 and 4 (0-based rounds 1 and 3)


def tiny_resnet() -> ResNet:
    return ResNet(ResNetConfig(extra_blocks=0, widths=(4, 8, 8), num_classes=4))


def seeded_grow(model, seed, place=None):
    return grow(model, seed)


def run_growth(insert_fn=seeded_grow, *, restart=False, plan=PLAN) -> RunGrowth:
    x, _ = next(iter(TensorLoader(DATA.x_train[:8], DATA.y_train[:8], 8, train=False, mean=DATA.mean, std=DATA.std)))
    return RunGrowth(
        insertions=plan,
        insert=insert_fn,
        check_inputs=x,
        flops_per_example=lambda m: training_flops_per_image(m, (3, 8, 8), 4),
        restart=restart,
    )


def grow_run(run_dir, growth=None, *, model_seed=0, on_epoch_end=None, settings=SETTINGS):
    device.seed_everything(model_seed)
    model = tiny_resnet()
    summary = train(
        model,
        TensorLoader(DATA.x_train, DATA.y_train, BATCH, train=True, seed=7, **KEYS),
        {"test": TensorLoader(DATA.x_test, DATA.y_test, 32, train=False, **KEYS)},
        run_dir=run_dir,
        settings=settings,
        device=torch.device("cpu"),
        on_epoch_end=on_epoch_end,
        growth=growth or run_growth(),
    )
    return model, summary


class Killed(Exception):
    pass


def test_every_insertion_preserves_the_function_and_a_block_that_does_not_fails_the_run(tmp_path):
    model, summary = grow_run(tmp_path / "run")
    inserted = summary["growth"]["inserted"]
    assert [(r["epoch"], r["step"], r["seed"]) for r in inserted] == [(1, 4, 11), (3, 12, 12)]
    assert [r["place"] for r in inserted] == [1, 3]  # the cyclic rule: end of stage 0, then of stage 1
    assert all(r["function_check"] == {"train": 0.0, "eval": 0.0} for r in inserted)
    assert len(model.blocks) == 5 and model.config.extra_blocks == 2

    def broken(model, seed, place=None):  # a block whose output is not zero: the check must catch it
        place, block = seeded_grow(model, seed)
        nn.init.ones_(block.terminal.weight)
        return place, block

    with pytest.raises(GrowthBrokeFunction):
        grow_run(tmp_path / "broken", run_growth(broken))
    assert not (tmp_path / "broken" / WEIGHTS).exists()


@pytest.mark.parametrize("recipe", [SGDRecipe(epochs=2, lr=0.05), AdamRecipe(epochs=2, lr=1e-3, weight_decay=1e-4)])
def test_an_insertion_keeps_old_parameters_optimizer_state_and_gives_the_new_block_none(recipe):
    torch.manual_seed(0)
    model = tiny_resnet()
    optimizer = recipe.make_optimizer(model)
    x, y = next(iter(TensorLoader(DATA.x_train, DATA.y_train, 16, train=False, mean=DATA.mean, std=DATA.std)))
    for _ in range(2):
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    before = {p: {k: v.clone() for k, v in optimizer.state[p].items()} for p in model.parameters()}
    growth = run_growth()
    state = train_module.GrowthState()
    grown, block = insert(
        growth, state, model, optimizer, recipe.make_optimizer, insertion=Insertion(1, 5), step=2, where="t"
    )
    new = set(block.parameters())
    assert new and all(p not in grown.state for p in new)  # zero state: none yet
    old = [p for p in model.parameters() if p not in new]
    assert old and set(before) == set(old)
    for p in old:
        assert before[p].keys() == grown.state[p].keys()
        assert all(torch.equal(before[p][k], grown.state[p][k]) for k in before[p])
    if isinstance(recipe, AdamRecipe):
        assert all(float(grown.state[p]["step"]) == 2.0 for p in old)  # the step count carried
    assert {id(p) for g in grown.param_groups for p in g["params"]} == {id(p) for p in model.parameters()}
    restarted, _ = insert(
        run_growth(restart=True),
        state,
        model,
        grown,
        recipe.make_optimizer,
        insertion=Insertion(2, 6),
        step=3,
        where="t",
    )
    assert not restarted.state  # the ablation starts empty


def lrs_of(monkeypatch, tmp_path, growth):
    seen = []
    real = epoch_module._set_lr

    def record(optimizer, lr):
        seen.append(lr)
        return real(optimizer, lr)

    monkeypatch.setattr(epoch_module, "_set_lr", record)
    _, summary = grow_run(tmp_path, growth)
    return seen, summary


def test_the_learning_rate_follows_the_one_schedule_across_insertions(tmp_path, monkeypatch):
    seen, summary = lrs_of(monkeypatch, tmp_path / "one", run_growth())
    schedule = Schedule(0.05, 16, 4)
    assert summary["steps"] == 16 and seen == [schedule.lr(s) for s in range(16)]
    # the ablation: a warm-up and a cosine per segment, [0, 4), [4, 12), [12, 16)
    seen, _ = lrs_of(monkeypatch, tmp_path / "restart", run_growth(restart=True))
    segments = [(0, 4), (4, 12), (12, 16)]
    expected = [Schedule(0.05, b - a, 4).lr(s - a) for a, b in segments for s in range(a, b)]
    assert seen == expected and seen[4] == seen[0] == 0.05 / 4  # the warm-up restarts at the insertion


@pytest.mark.parametrize("restart", [False, True])
def test_a_run_killed_before_or_just_after_an_insertion_resumes_bit_identically(tmp_path, deterministic, restart):
    whole_model, whole = grow_run(tmp_path / "whole", run_growth(restart=restart))

    def kill_after(epoch_done):
        def hook(epoch, record):
            if epoch == epoch_done:
                raise Killed

        return hook

    calls = []

    def dies_after_inserting(model, seed, place=None):  # the process dies right after the block went in
        out = seeded_grow(model, seed)
        calls.append(seed)
        if len(calls) == 1:
            raise Killed
        return out

    with pytest.raises(Killed):  # after epoch 1's checkpoint, before the insertion of round 1
        grow_run(tmp_path / "before", run_growth(restart=restart), on_epoch_end=kill_after(1))
    with pytest.raises(Killed):  # after epoch 2's checkpoint, which holds the first insertion (replayed on resume)
        grow_run(tmp_path / "between", run_growth(restart=restart), on_epoch_end=kill_after(2))
    with pytest.raises(Killed):
        grow_run(tmp_path / "after", run_growth(dies_after_inserting, restart=restart))
    for name in ("before", "between", "after"):
        _, resumed = grow_run(tmp_path / name, run_growth(restart=restart), model_seed=123)  # the checkpoint wins
        a, b = load_weights(tmp_path / "whole"), load_weights(tmp_path / name)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
        assert resumed["growth"] == whole["growth"] and resumed["train_flops"] == whole["train_flops"]
        assert [r["train_loss"] for r in run_store.read_metrics(tmp_path / name)] == [
            r["train_loss"] for r in run_store.read_metrics(tmp_path / "whole")
        ]


def hand_flops(model: ResNet, hw: int = 8) -> int:
    """Training FLOPs of one image by hand: 2 x multiply-adds of every convolution and the head forward, twice
    that backward (input and weight gradients), except the stem's input gradient (the image needs none)."""
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    sizes, size = [], hw
    for conv in convs:
        size = size // conv.stride[0]
        sizes.append(size)
    forward = [2 * c.in_channels * c.out_channels * 9 * s * s for c, s in zip(convs, sizes, strict=True)]
    head = 2 * model.head.fc.in_features * model.head.fc.out_features
    return 3 * (sum(forward) + head) - forward[0]


def test_flops_are_counted_at_each_epochs_depth_against_a_hand_count(tmp_path):
    _, summary = grow_run(tmp_path / "run")
    depths = [tiny_resnet(), tiny_resnet(), tiny_resnet()]  # ResNet-8, -9, -10 as the run grows them
    for k, model in enumerate(depths):
        for seed in (11, 12)[:k]:
            seeded_grow(model, seed)
    per_epoch = [hand_flops(depths[0]), hand_flops(depths[1]), hand_flops(depths[1]), hand_flops(depths[2])]
    assert summary["train_flops"] == 64 * sum(per_epoch)  # 64 images an epoch, at that epoch's depth
    assert summary["growth"]["flops_per_example"] == hand_flops(depths[2])
    records = run_store.read_metrics(tmp_path / "run")
    assert [r["insertions"] for r in records] == [0, 1, 1, 2]
    assert [r["train_flops"] for r in records] == [64 * sum(per_epoch[: i + 1]) for i in range(4)]


def test_under_regional_compilation_the_inserted_blocks_are_compiled_and_the_run_trains_as_eager(tmp_path, monkeypatch):
    """With ``compile`` on, every block is compiled in place, an inserted one too; the float64 check and the FLOP
    count run on eager copies (a copied compiled forward would call the original block's weights). The eager
    backend compiles the same operations, so the run ends with the eager run's weights."""
    real = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: real(fn, **{**kw, "backend": "eager"}))
    _, eager = grow_run(tmp_path / "eager")
    model, compiled = grow_run(tmp_path / "compiled", settings=replace(SETTINGS, compile=True))
    assert compiled["compile"]["regions"] == 5  # three blocks at the start, two inserted
    assert compiled["growth"] == eager["growth"] and compiled["train_flops"] == eager["train_flops"]
    a, b = load_weights(tmp_path / "eager"), load_weights(tmp_path / "compiled")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert all("forward" not in vars(block) for block in model.blocks)  # eager again after training


def test_growth_under_two_processes_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.setattr(train_module, "world_size", lambda: 2)
    with pytest.raises(UserError, match="not supported under torch.distributed"):
        grow_run(tmp_path / "run")
    assert not (tmp_path / "run").exists()
