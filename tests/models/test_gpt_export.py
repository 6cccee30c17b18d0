"""common/models/gpt_export.py: our GPT as a Hugging Face GPT-2 (same logits), the byte tokenizer, a run's export."""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2LMHeadModel
from transformers.convert_slow_tokenizer import bytes_to_unicode

from common.data.tokenizers import ByteTokenizer
from common.errors import UserError
from common.experiments.shared.gpt2_runs import export_run, load_run_model
from common.models.gpt import GPT, GPTConfig
from common.models.gpt_export import byte_tokenizer, hf_config, to_hf_gpt2
from common.runs import run_store
from common.training.checkpoints import WEIGHTS

script = importlib.import_module("05_gpt2_ascend")
TEXT = 'Größe: 日本語 🙂 naïve café, "a ." it \'s\n\t<|endoftext|> end'  # 1-4 byte characters, the literal EOT text
SMALL = GPTConfig(n_layer=2, n_embd=16, n_head=2, block_size=16, vocab_size=257)


def random_gpt(config: GPTConfig, seed: int = 0) -> GPT:
    """A GPT in float64, eval mode, every parameter (biases, LayerNorm affines) N(0, 0.3^2) added: nothing is 0 or 1.

    The large weights drive the MLP's pre-activations to |x| ~ 1, where the tanh and the erf GELU differ by ~1e-3:
    an export with the wrong activation cannot pass the 1e-10 check."""
    torch.manual_seed(seed)
    model = GPT(config).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model


def ids(config: GPTConfig, batch: int = 3, seed: int = 1) -> torch.Tensor:
    return torch.randint(
        0, config.vocab_size, (batch, config.block_size), generator=torch.Generator().manual_seed(seed)
    )


@pytest.mark.parametrize(
    "config",
    [SMALL, GPTConfig(n_layer=3, n_embd=16, n_head=4, n_inner=24, block_size=16, vocab_size=257, bias=False)],
    ids=["bias", "no-bias-n_inner-24"],
)
def test_the_hf_gpt2_gives_our_logits_in_float64(config):
    model = random_gpt(config)
    hf = to_hf_gpt2(model)
    c = hf.config
    assert (c.vocab_size, c.n_positions, c.n_embd, c.n_layer, c.n_head, c.n_inner) == (
        320,  # the padded embedding: 257 -> 320
        16,
        16,
        config.n_layer,
        config.n_head,
        config.hidden,
    )
    assert c.activation_function == "gelu_new" and c.tie_word_embeddings and c.eos_token_id == c.bos_token_id == 256
    assert (c.resid_pdrop, c.embd_pdrop, c.attn_pdrop, c.layer_norm_epsilon) == (0.0, 0.0, 0.0, config.layer_norm_eps)
    assert hf.dtype == torch.float64 and hf.lm_head.weight is hf.transformer.wte.weight  # tied, one parameter
    x = ids(config)
    with torch.no_grad():
        ours, theirs = model(x), hf(x).logits
    # The same operations in another order (addmm vs linear, the attention kernel): float64 rounding, ~1e-15 at
    # logits of size ~10 (seen: < 1e-14); a wrong transpose, head split or GELU moves them by > 1e-4.
    assert ours.abs().max() > 1.0
    torch.testing.assert_close(theirs, ours, rtol=0, atol=1e-10)
    # The check can fail: the same weights under the erf GELU (GPT-2's "gelu") are not our model.
    erf_config = hf_config(config)
    erf_config.activation_function = "gelu"
    erf = GPT2LMHeadModel(erf_config).double()
    erf.load_state_dict(hf.state_dict())
    with torch.no_grad():
        assert (erf.eval()(x).logits - ours).abs().max() > 1e-6


def test_the_byte_tokenizer_gives_our_ids_and_decodes_back():
    ours, tokenizer = ByteTokenizer(), byte_tokenizer()
    alphabet = bytes_to_unicode()
    assert (
        tokenizer.get_vocab() == {**{alphabet[b]: b for b in range(256)}, "<|endoftext|>": 256}
        and len(tokenizer) == 257
    )
    assert tokenizer.eos_token_id == tokenizer.bos_token_id == ours.eot_id == 256
    texts = [TEXT, "", " leading and trailing spaces  ", bytes(range(32, 127)).decode()]
    expected = [a.tolist() for a in ours.encode_batch(texts)]
    assert tokenizer(texts)["input_ids"] == expected  # no BOS/EOS added, no regex split, no prefix space
    assert len(expected[0]) == len(TEXT.encode("utf-8")) > len(TEXT)  # non-ASCII: several ids per character
    assert [tokenizer.decode(e) for e in expected] == texts
    # EOT (256) is dropped as ours drops it; invalid UTF-8 becomes U+FFFD in both.
    for stream in ([256, *expected[0], 256], [0xE6, 0x97, 104, 105], [0xFF]):
        assert tokenizer.decode(stream, skip_special_tokens=True) == ours.decode(stream)


# ----------------------------------------------------------------------------- a run of script 05
TINY = [
    *("--preset", "smoke", "--n-embd", "16", "--n-head", "2", "--block-size", "16", "--depths", "2"),
    *("--batch-tokens", "64", "--micro-batch-size", "4", "--steps", "2", "--n-evals", "1", "--warmup-steps", "1"),
    *("--val-tokens", "256", "--probe-batch-size", "2", "--no-exact", "--device", "cpu"),
]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> tuple[Path, Path]:
    """Two finished runs of the real script 05 (smoke, L = 2, 2 steps): one trained, one reusing its training."""
    root = tmp_path_factory.mktemp("sweep")
    rng = np.random.default_rng(0)
    corpus = root / "corpus.txt"
    corpus.write_text("".join(rng.choice(["the cat sat on the mat. ", "héllo wörld, 日本. "], 300)))
    where = ["--text-file", str(corpus), "--data-root", str(root / "tok"), "--out", str(root / "runs")]
    assert script.main([*TINY, *where, "--probe-batches", "1"]) == 0
    assert script.main([*TINY, *where, "--probe-batches", "2"]) == 0  # other probe settings: training reused
    trained, twin = sorted(
        run_store.run_dirs(root / "runs" / "gpt2_ascend"), key=lambda d: "trained_in" in run_store.read_result(d)
    )
    assert run_store.read_result(twin)["trained_in"] == trained.name and not (twin / WEIGHTS).exists()
    return trained, twin


def test_export_run_writes_a_folder_that_from_pretrained_loads_with_our_logits(sweep, tmp_path):
    trained, twin = sweep
    ours = load_run_model(trained)
    assert ours.wte.weight.dtype == torch.float32 and not ours.training
    folder = export_run(trained, tmp_path / "hf")
    assert folder == tmp_path / "hf" and {"config.json", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in folder.iterdir()
    }
    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    assert isinstance(model, GPT2LMHeadModel) and model.dtype == torch.float32 and tokenizer.model_max_length == 16
    text = "héllo wörld, the cat"  # 22 bytes: cut to the context of 16
    x = torch.tensor([tokenizer(text)["input_ids"][:16]])
    assert x[0].tolist() == ByteTokenizer().encode_batch([text])[0][:16].tolist()
    with torch.no_grad():
        mine, theirs = ours(x), model.eval()(x).logits
    # float32: unit roundoff 6e-8 on logits of size ~1, accumulated over sums of <= 64 terms and 2 blocks: ~1e-6
    # worst case; 1e-5 passes rounding only (a mapping error moves the logits by ~1e-2).
    torch.testing.assert_close(theirs, mine, rtol=1e-5, atol=1e-5)

    # A run that reused another's training exports that training's weights; an export is replaced in place.
    again = export_run(twin, folder)
    assert [p.name for p in tmp_path.iterdir()] == ["hf"]  # no temporary or old sibling left
    reloaded = AutoModelForCausalLM.from_pretrained(again, local_files_only=True)
    assert all(torch.equal(a, b) for a, b in zip(reloaded.state_dict().values(), model.state_dict().values()))

    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("not an export")
    with pytest.raises(UserError, match="is not an earlier export"):
        export_run(trained, tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "not an export"


def test_a_run_without_a_finished_checkpoint_is_one_line_naming_script_05(sweep, tmp_path):
    trained, twin = sweep
    killed = tmp_path / trained.name  # what a killed run leaves: config.json, no result.json, no model.pt
    shutil.copytree(trained, killed, ignore=shutil.ignore_patterns("result.json", WEIGHTS))
    for run_dir, why in ((killed, "has not finished"), (tmp_path / "empty", "is not a run directory")):
        with pytest.raises(UserError) as info:
            export_run(run_dir, tmp_path / "out")
        message = str(info.value)
        assert why in message and "run 05_gpt2_ascend.py" in message and "\n" not in message
    assert not (tmp_path / "out").exists()

    orphan = tmp_path / "orphan" / twin.name  # reused a training that is gone
    shutil.copytree(twin, orphan)
    with pytest.raises(UserError, match=f"reused the training of .*{trained.name}, which has no model.pt"):
        load_run_model(orphan)
