"""Make the offline assets torchtitan's llama3 debug model needs: a tokenizer and a dataset.

torchtitan's `llama3_debugmodel` config reads a Hugging Face tokenizer directory
(`--hf_assets_path`, which must hold `tokenizer.json` + `tokenizer_config.json`) and the
`c4_test` dataset, which `datasets.load_dataset(PATH, split="train")` opens from a local
directory (`--dataloader.dataset_path`). Neither ships with the pip package and the
machines this runs on have no internet, so this script makes both, deterministically:

- a synthetic English-like corpus from a fixed word list and a seeded RNG (no real data:
  the simulation never looks at token values beyond shapes and a few counts);
- a byte-level BPE tokenizer trained on it with `tokenizers`, vocabulary 2,000 (the debug
  model's embedding has 2,048 rows, so every id fits), with `<|begin_of_text|>` /
  `<|end_of_text|>` as BOS/EOS like Llama 3;
- `DIR/dataset/c4_mini.json`: JSON lines `{"text": ...}`, the format of torchtitan's own
  `tests/assets/c4_test` (a few hundred KB; torchtitan's loader re-loops it forever).

Usage: python make_assets.py [OUT_DIR]   (default: build/torchtitan_assets in the repo)
Prints the two paths to pass to torchtitan. Re-running with the same output is a no-op.
"""
from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

VOCAB_SIZE = 2000  # < 2048 rows of the debug model's embedding
N_DOCS = 400
SEED = 1234
BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"
VERSION = "1"  # bump when the generated files change

_WORDS = """the of and to in is was for on that with as by at from his her it an were are which this be
or has had not but also their they first one its new after who two been other into time year during
city world most more over between when all these some would only years people may such under about
state school later called both while since part well many made three can team later name work known
model train data step loss memory token layer batch learning rate value graph network device cluster
simulate kernel stream compute shard gather reduce scatter tensor parallel pipeline stage micro
river north south east west small large early late high low long short great old young public
music film book game season club league war army church family house road line area system group""".split()


def _sentence(rng: random.Random) -> str:
    n = rng.randint(6, 18)
    words = [rng.choice(_WORDS) for _ in range(n)]
    if rng.random() < 0.3:
        words.insert(rng.randrange(n), str(rng.randint(2, 2030)))
    return " ".join(words).capitalize() + rng.choice([".", ".", ".", "?", "!"])


def corpus(n_docs: int = N_DOCS, seed: int = SEED) -> list[str]:
    """Deterministic pseudo-text documents of 3-12 sentences each."""
    rng = random.Random(seed)
    return [" ".join(_sentence(rng) for _ in range(rng.randint(3, 12))) for _ in range(n_docs)]


def make_tokenizer(texts: list[str], out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=[BOS, EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    config = {"bos_token": BOS, "eos_token": EOS, "add_bos_token": True, "add_eos_token": True,
              "model_max_length": 131072, "tokenizer_class": "PreTrainedTokenizerFast"}
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n")


def make_dataset(texts: list[str], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "c4_mini.json", "w") as f:
        for t in texts:
            f.write(json.dumps({"text": t}) + "\n")


def make(out_dir: str | os.PathLike) -> tuple[Path, Path]:
    """Create (or reuse) the assets; returns (tokenizer dir, dataset dir)."""
    root = Path(out_dir).resolve()
    tok_dir, ds_dir = root / "tokenizer", root / "dataset"
    stamp = root / "VERSION"
    if stamp.exists() and stamp.read_text().strip() == VERSION:
        return tok_dir, ds_dir
    texts = corpus()
    make_tokenizer(texts, tok_dir)
    make_dataset(texts, ds_dir)
    stamp.write_text(VERSION + "\n")
    return tok_dir, ds_dir


def main(argv: list[str]) -> None:
    default = Path(__file__).resolve().parents[3] / "build" / "torchtitan_assets"
    tok_dir, ds_dir = make(argv[0] if argv else default)
    print(f"--hf_assets_path {tok_dir} --dataloader.dataset_path {ds_dir}")


if __name__ == "__main__":
    main(sys.argv[1:])
