"""Writes test/fixtures/configs/training-args/: transformers' own dump of TrainingArguments for real commands.

    /tmp/trl/bin/python tools/oracle/training_args_dump.py      # venv of tools/oracle/TRAINERS.md

For each example below (a command line copied from a tagged or pinned page of the transformers or TRL
repositories), the arguments after the script are parsed exactly as the example scripts parse their
TrainingArguments part: `HfArgumentParser(TrainingArguments).parse_args_into_dataclasses(argv,
return_remaining_strings=True)` (the strings left over are the script's own dataclasses: model, data, LoRA
flags; they are recorded, not used). The result's `to_json_string()` is written to `<name>.json`: every
field, post-init values included. `sources.json` records each example's repository, path, ref, url, the
argv, the strings left over, what this machine had to patch, and the command that produced the file.

Each example runs in a fresh child process (TrainingArguments sets process-wide state: environment
variables, accelerate's PartialState), with no ACCELERATE_* / distributed variables in its environment.

Patches, applied only where the example needs them and recorded per example:
  * bf16 on this CPU-only machine: `__post_init__` refuses bf16 without a bf16 GPU
    (transformers 5.18 training_args.py:1745-1751); only that check,
    `transformers.training_args.is_torch_bf16_gpu_available`, is made to answer True.
  * deepspeed: the `deepspeed` package is not in the wheelhouse, so building the DeepSpeed plugin
    (training_args.py:1674-1684: `HfTrainerDeepSpeedConfig(self.deepspeed)` and accelerate's
    `DeepSpeedPlugin`) is stubbed. Neither writes back into the arguments: the plugin works on a deep copy
    (accelerate 1.15 utils/deepspeed.py:137-140) and `self.deepspeed` is left as given
    (training_args.py:1677), so the dump's fields are what the real run dumps.
"""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "test" / "fixtures" / "configs" / "training-args"
DS = ROOT / "test" / "fixtures" / "configs" / "deepspeed"

TRANSFORMERS = "huggingface/transformers"
TRL = "huggingface/trl"
TRL_TAG = "v1.9.0"
TRL_COMMIT = "35def3ee000a87f6839e66f4b7749b06274ed1b3"


def gh(repo, ref, path, line=None):
    return f"https://github.com/{repo}/blob/{ref}/{path}" + (f"#L{line}" if line else "")


# name, repository, path, ref (tag or commit), line, the command as the page writes it, the script's
# position in it (argv = the words after it), use (equal: read and compared with hand-written options;
# error: a real command vram-ts refuses), patches, note.
EXAMPLES = [
    {
        "name": "clm-gpt2",
        "repo": TRANSFORMERS,
        "path": "examples/pytorch/language-modeling/README.md",
        "commit": "00aff44a1d63c9017ee0da9308ad4b7ba045bbf9",
        "command": """python run_clm.py \\
    --model_name_or_path gpt2 \\
    --dataset_name wikitext \\
    --dataset_config_name wikitext-2-raw-v1 \\
    --per_device_train_batch_size 8 \\
    --per_device_eval_batch_size 8 \\
    --do_train \\
    --do_eval \\
    --output_dir /tmp/test-clm""",
        "use": "equal",
    },
    {
        "name": "mlm-roberta-files",
        "repo": TRANSFORMERS,
        "path": "examples/pytorch/language-modeling/README.md",
        "commit": "00aff44a1d63c9017ee0da9308ad4b7ba045bbf9",
        "command": """python run_mlm.py \\
    --model_name_or_path roberta-base \\
    --train_file path_to_train_file \\
    --validation_file path_to_validation_file \\
    --per_device_train_batch_size 8 \\
    --per_device_eval_batch_size 8 \\
    --do_train \\
    --do_eval \\
    --output_dir /tmp/test-mlm""",
        "use": "equal",
    },
    {
        "name": "trl-sft-lora-peft",
        "repo": TRL,
        "path": "docs/source/peft_integration.md",
        "tag": TRL_TAG,
        "line": 184,
        "command": """python trl/scripts/sft.py \\
    --model_name_or_path Qwen/Qwen2-0.5B \\
    --dataset_name trl-lib/Capybara \\
    --learning_rate 2.0e-4 \\
    --num_train_epochs 1 \\
    --per_device_train_batch_size 2 \\
    --gradient_accumulation_steps 8 \\
    --use_peft \\
    --lora_r 32 \\
    --lora_alpha 16 \\
    --output_dir Qwen2-0.5B-SFT-LoRA""",
        "use": "equal",
        "note": "the script parses SFTConfig; only its TrainingArguments part is read here",
    },
    {
        "name": "trl-sft-lora-without-regret",
        "repo": TRL,
        "path": "docs/source/lora_without_regret.md",
        "tag": TRL_TAG,
        "line": 99,
        "command": """uv run "https://raw.githubusercontent.com/huggingface/trl/main/trl/scripts/sft.py" \\
    --model_name_or_path Qwen/Qwen2.5-3B-Instruct \\
    --dataset_name open-thoughts/OpenThoughts-114k \\
    --learning_rate 2.0e-5 \\
    --num_train_epochs 1 \\
    --packing \\
    --per_device_train_batch_size 2 \\
    --gradient_accumulation_steps 16 \\
    --eval_strategy no \\
    --use_peft \\
    --lora_r 256 \\
    --lora_alpha 16 \\
    --lora_target_modules all-linear \\
    --output_dir Qwen2.5-3B-OpenThoughts-LoRA \\
    --report_to trackio \\
    --push_to_hub""",
        "script": 2,
        "use": "equal",
        "note": "the script parses SFTConfig; only its TrainingArguments part is read here",
    },
    {
        "name": "trl-grpo-lora-without-regret",
        "repo": TRL,
        "path": "docs/source/lora_without_regret.md",
        "tag": TRL_TAG,
        "line": 226,
        "command": """uv run "https://huggingface.co/datasets/burtenshaw/lora-without-regrets/resolve/main/grpo.py" \\
    --model_name_or_path Qwen/Qwen3-0.6B \\
    --dataset_name HuggingFaceH4/OpenR1-Math-220k-default-verified \\
    --output_dir grpo-full-qwen3-0.6b \\
    --learning_rate 1.0e-6 \\
    --lr_scheduler_type cosine \\
    --warmup_steps 0.0 \\
    --max_grad_norm 1.0 \\
    --beta 0.0 \\
    --max_completion_length 4096 \\
    --num_generations 16 \\
    --generation_batch_size 16 \\
    --gradient_accumulation_steps 8 \\
    --per_device_train_batch_size 1 \\
    --num_train_epochs 1 \\
    --lora_r 1 \\
    --lora_alpha 32 \\
    --lora_dropout 0.0 \\
    --lora_target_modules all-linear \\
    --vllm_mode colocate \\
    --save_strategy steps \\
    --save_steps 50 \\
    --save_total_limit 1 \\
    --logging_steps 1 \\
    --max_steps 200 \\
    --report_to trackio""",
        "script": 2,
        "use": "equal",
        "note": "the script parses GRPOConfig; only its TrainingArguments part is read here (the GRPO fields are left over)",
    },
    {
        "name": "trl-ssd-bf16",
        "repo": TRL,
        "path": "docs/source/ssd_trainer.md",
        "tag": TRL_TAG,
        "line": 70,
        "command": """python examples/scripts/ssd.py \\
    --model_name_or_path Qwen/Qwen3-4B-Instruct-2507 \\
    --dataset_name microsoft/rStar-Coder \\
    --dataset_config seed_sft \\
    --prompt_column question \\
    --output_dir outputs/ssd-qwen3-4b \\
    --per_device_train_batch_size 1 \\
    --gradient_accumulation_steps 32 \\
    --learning_rate 5e-6 \\
    --lr_scheduler_type cosine \\
    --max_prompt_length 1024 \\
    --max_completion_length 65536 \\
    --temperature 1.6 \\
    --top_k 20 \\
    --top_p 0.8 \\
    --num_train_epochs 1 \\
    --bf16 \\
    --report_to trackio""",
        "use": "equal",
        "patches": ["bf16"],
        "note": "the script parses its own SSD config; only its TrainingArguments part is read here",
    },
    {
        "name": "perf-gradient-checkpointing",
        "repo": TRANSFORMERS,
        "path": "docs/source/en/perf_train_gpu_one.md",
        "commit": "04b696acabab4a3ca21b1716a488d8223e57b726",
        "command": "TrainingArguments(per_device_train_batch_size=1, gradient_accumulation_steps=4, gradient_checkpointing=True, **default_args)",
        "argv": ["--per_device_train_batch_size", "1", "--gradient_accumulation_steps", "4", "--gradient_checkpointing", "True", "--output_dir", "/tmp/x"],
        "use": "equal",
        "note": "a Python call on the page, written as the argv HfArgumentParser takes for the same keywords; the page's **default_args are not shown in it, so only --output_dir /tmp/x stands for them",
    },
    {
        "name": "perf-bf16",
        "repo": TRANSFORMERS,
        "path": "docs/source/en/perf_train_gpu_one.md",
        "commit": "04b696acabab4a3ca21b1716a488d8223e57b726",
        "command": "training_args = TrainingArguments(bf16=True, **default_args)",
        "argv": ["--bf16", "True", "--output_dir", "/tmp/x"],
        "use": "equal",
        "patches": ["bf16"],
        "note": "a Python call on the page, written as argv; **default_args stood for by --output_dir /tmp/x",
    },
    {
        "name": "ds-notebook-path",
        "repo": TRANSFORMERS,
        "path": "docs/source/en/deepspeed.md",
        "commit": "019da1e8268a76436582cccc51c03638d267aa5b",
        "command": 'training_args = TrainingArguments(..., deepspeed="ds_config_zero3.json")',
        "argv": ["--output_dir", "/tmp/x", "--deepspeed", "ds_config_zero3.json"],
        "use": "equal",
        "patches": ["deepspeed"],
        "note": "the Notebook section's call, written as argv (`...` stood for by --output_dir /tmp/x); the dump keeps the path, which the reader returns for its caller to read",
    },
    {
        "name": "ds-nested-dict-zero2-bf16",
        "repo": TRANSFORMERS,
        "path": "docs/source/en/deepspeed.md",
        "commit": "019da1e8268a76436582cccc51c03638d267aa5b",
        "command": "args = TrainingArguments(..., deepspeed=ds_config_dict)",
        "argv_from": "ds-dict",
        "ds_config": "hf-tests-zero2-bf16.json",
        "argv": ["--output_dir", "/tmp/x", "--bf16", "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "2"],
        "use": "equal",
        "patches": ["bf16", "deepspeed"],
        "note": (
            'the "nested dict" way of passing a DeepSpeed config on that page, with the dict being transformers\' own '
            "tests/deepspeed/ds_config_zero2_bf16.json (test/fixtures/configs/deepspeed/hf-tests-zero2-bf16.json, commit "
            "a9c1721ff6eeba4729ba7760c6ec809c72935b2b) given on the command line as a JSON string, which __post_init__ parses "
            "into the dict (training_args.py:1506-1513); the batch, accumulation and bf16 are chosen here"
        ),
    },
    {
        "name": "perf-adafactor",
        "repo": TRANSFORMERS,
        "path": "docs/source/en/perf_train_gpu_one.md",
        "commit": "04b696acabab4a3ca21b1716a488d8223e57b726",
        "command": 'training_args = TrainingArguments(per_device_train_batch_size=4, optim="adafactor", **default_args)',
        "argv": ["--per_device_train_batch_size", "4", "--optim", "adafactor", "--output_dir", "/tmp/x"],
        "use": "error",
        "error": ["optim"],
        "note": "Adafactor is not one of the optimizers vram-ts models",
    },
    {
        "name": "ds-translation-zero2-fp16",
        "repo": TRANSFORMERS,
        "path": "docs/source/en/deepspeed.md",
        "commit": "019da1e8268a76436582cccc51c03638d267aa5b",
        "command": """deepspeed --num_gpus=1 examples/pytorch/translation/run_translation.py \\
--deepspeed tests/deepspeed/ds_config_zero2.json \\
--model_name_or_path t5-small --per_device_train_batch_size 1 \\
--output_dir output_dir --overwrite_output_dir --fp16 \\
--do_train --max_train_samples 500 --num_train_epochs 1 \\
--dataset_name wmt16 --dataset_config "ro-en" \\
--source_lang en --target_lang ro""",
        "script": 2,
        "use": "error",
        "error": ["fp16"],
        "patches": ["deepspeed"],
        "note": "run_translation parses Seq2SeqTrainingArguments, a subclass; --overwrite_output_dir is no field of TrainingArguments in 5.18 and is left over with the script's own flags. fp16 is not modelled",
    },
    {
        "name": "trl-sft-full-eval",
        "repo": TRL,
        "path": "trl/scripts/sft.py",
        "tag": TRL_TAG,
        "line": 27,
        "command": """python trl/scripts/sft.py \\
    --model_name_or_path Qwen/Qwen2-0.5B \\
    --dataset_name trl-lib/Capybara \\
    --learning_rate 2.0e-5 \\
    --num_train_epochs 1 \\
    --packing \\
    --per_device_train_batch_size 2 \\
    --gradient_accumulation_steps 8 \\
    --eos_token '<|im_end|>' \\
    --eval_strategy steps \\
    --eval_steps 100 \\
    --output_dir Qwen2-0.5B-SFT \\
    --push_to_hub""",
        "use": "error",
        "error": ["eval_strategy"],
        "note": "evaluation during training is not modelled (eval_strategy must be 'no')",
    },
    {
        "name": "fsdp2-config",
        "repo": TRANSFORMERS,
        "path": "docs/source/en/fsdp.md",
        "commit": "060988b644b98c9e87b381c6000f29c4ab8477ba",
        "command": 'TrainingArguments(..., fsdp=True, fsdp_config="path/to/fsdp.json")',
        "kwargs": True,
        "fsdp_config": {
            "version": 2,
            "reshard_after_forward": True,
            "cpu_offload": False,
            "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"],
            "state_dict_type": "FULL_STATE_DICT",
            "cpu_ram_efficient_loading": True,
            "activation_checkpointing": True,
        },
        "argv": {"output_dir": "/tmp/x", "fsdp": True},
        "use": "error",
        "error": ["fsdp"],
        "note": (
            "the page's Python call with its FSDP config file (the ```json fence) as the dict; fsdp=True is a bool, which no "
            "argv can write (the field is typed str), so the keywords are read by HfArgumentParser.parse_dict, the path of a "
            "JSON/YAML arguments file. The Trainer's FSDP (accelerate's fsdp2_prepare_model) is not modelled"
        ),
    },
]


def argv_of(example):
    """The argv read: the command's words after its script, or the argv written for a Python call on the page."""
    if example.get("argv_from") == "ds-dict":
        config = json.loads((DS / example["ds_config"]).read_text())
        return [*example["argv"], "--deepspeed", json.dumps(config)]
    if "argv" in example:
        return list(example["argv"])
    return script_words(example)


def script_words(example):
    """The words of the command after the launcher and the script (the script is word 1, or `script`)."""
    words = shlex.split(example["command"].replace("\\\n", " "))
    if words[0] == "deepspeed":
        return words[words.index(next(w for w in words if w.endswith(".py"))) + 1 :]
    return words[example.get("script", 1) + 1 :]


def child(name):
    """Runs one example (in a child process) and prints its dump and left-over strings as JSON."""
    example = next(e for e in EXAMPLES if e["name"] == name)
    patches = example.get("patches", [])
    import transformers.training_args as training_args

    if "bf16" in patches:
        training_args.is_torch_bf16_gpu_available = lambda: True
    if "deepspeed" in patches:
        import accelerate.utils
        import transformers.integrations.deepspeed as hf_deepspeed

        class Stub:
            def __init__(self, *args, **kwargs):
                pass

            def trainer_config_process(self, *args, **kwargs):
                pass

        hf_deepspeed.HfTrainerDeepSpeedConfig = Stub
        accelerate.utils.DeepSpeedPlugin = Stub
    from transformers import HfArgumentParser, TrainingArguments

    parser = HfArgumentParser(TrainingArguments)
    if example.get("kwargs"):
        argv = {**example["argv"], "fsdp_config": example["fsdp_config"]}
        (args,) = parser.parse_dict(argv)
        rest = []
    else:
        argv = argv_of(example)
        (args, rest) = parser.parse_args_into_dataclasses(argv, return_remaining_strings=True)
    print(json.dumps({"argv": argv, "rest": rest, "dump": args.to_json_string()}))


def main():
    import transformers

    assert transformers.__version__ == "5.18.0", transformers.__version__
    OUT.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "FSDP_")) and k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    sources = []
    for example in EXAMPLES:
        done = subprocess.run([sys.executable, __file__, "--child", example["name"]], env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            sys.exit(f"{example['name']} failed:\n{done.stderr[-3000:]}")
        got = json.loads(done.stdout.strip().splitlines()[-1])
        (OUT / f"{example['name']}.json").write_text(got["dump"] + "\n")
        ref = example.get("tag") or example["commit"]
        entry = {
            "name": example["name"],
            "repo": example["repo"],
            "path": example["path"],
            **({"tag": example["tag"], "commit": TRL_COMMIT} if "tag" in example else {"commit": example["commit"]}),
            "url": gh(example["repo"], ref, example["path"], example.get("line")),
            "command": example["command"],
            "argv": got["argv"],
            "left_over": got["rest"],
            "use": example["use"],
            **({"error": example["error"]} if "error" in example else {}),
            "patches": example.get("patches", []),
            "produced_by": f"/tmp/trl/bin/python tools/oracle/training_args_dump.py  (this example: its child, --child {example['name']})",
            **({"note": example["note"]} if "note" in example else {}),
        }
        sources.append(entry)
        print(f"{example['name']}: {len(got['argv'])} words, {len(got['rest'])} left over")
    about = {
        "about": (
            "TrainingArguments(...).to_json_string() of transformers 5.18.0 (venv of tools/oracle/TRAINERS.md) for real "
            "commands, parsed by HfArgumentParser(TrainingArguments).parse_args_into_dataclasses(argv, "
            "return_remaining_strings=True). use: equal (test/config/training-args.test.ts checks the reading against "
            "hand-written options) or error (a real command vram-ts refuses, at the field named). Patches: bf16 = "
            "transformers.training_args.is_torch_bf16_gpu_available answers True (this machine has no GPU; "
            "training_args.py:1745-1751); deepspeed = HfTrainerDeepSpeedConfig and accelerate's DeepSpeedPlugin stubbed "
            "(the deepspeed package is not installed; neither writes into the arguments: training_args.py:1674-1684)."
        ),
        "produced_by": "/tmp/trl/bin/python tools/oracle/training_args_dump.py",
        "versions": {"transformers": transformers.__version__, "python": sys.version.split()[0]},
        "examples": sources,
    }
    (OUT / "sources.json").write_text(json.dumps(about, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(sys.argv[2])
    else:
        main()
