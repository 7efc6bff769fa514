"""Every place the workflow reads or sets what a library does not document (a private name, an
attribute of an object it hands out, a switch of its exit work) fails here, naming the library
and the attribute, when a release removes it or changes what it means; each test checks the
meaning, not only the name. Where a public way does the same, the workflow takes it instead
(the fine-tuning's batch norms: torch's public classes).

Guarded elsewhere: open_clip's model config files read without importing it
(test_models_open_clip: a random model planned as open_clip resolves it); timm's and
open_clip's towers through the features they give (test_models_timm, test_models_open_clip:
equal to the libraries' own forward); the warm-start server's switch of torch's operator
libraries' finalizers (test_warm_start); the Snakemake workflow's attributes the rule files read
as the Snakefile is read (every dry run of the suite reads them); transformers' families' outputs
and ViTMAE's noise through the features they give (test_models_hf: equal to the library's own
forward on every patch).
"""

from __future__ import annotations

import subprocess
import sys

import open_clip
import timm
import torch
import transformers
from snakemake.cli import get_argument_parser
from transformers import (
    PreTrainedModel,
    SiglipVisionConfig,
    SiglipVisionModel,
    ViTConfig,
    ViTForImageClassification,
    ViTImageProcessor,
    ViTModel,
)

from conftest import REPOSITORY, snakemake
from imagenet_cog.core.snakemake_insides import DEFAULT_JOB_RATE, LISTING_OPTIONS
from imagenet_cog.finetune.train import BATCH_NORMS, set_batch_norm_momentum
from imagenet_cog.models.checkpoints import _legacy_checkpoint_globals
from imagenet_cog.models.hf_models import checkpoint_misfit
from imagenet_cog.models.open_clip_models import pooled_features
from imagenet_cog.models.registry import ModelSpec
from imagenet_cog.models.timm_models import pooled_norm, token_layout
from imagenet_cog.probes.fused_step import _is_compile_failure

# Four jobs of 1.5 s on one core, the cut applied at the run's start as the Snakefile's onstart
# applies it; it writes whether the default limiter was there to be removed.
RATE_SNAKEFILE = f"""
import sys
sys.path.insert(0, {str(REPOSITORY / "workflow")!r})
from imagenet_cog.core.snakemake_insides import drop_the_default_job_rate_limit


onstart:
    open("dropped.txt", "w").write(str(drop_the_default_job_rate_limit(workflow.scheduler)))


rule all:
    input:
        expand("done/{{n}}", n=range(4)),


rule wait:
    output:
        "done/{{n}}",
    shell:
        "sleep 1.5 && touch {{output}}"
"""
# a scheduling round with jobs ready, in Snakemake's --verbose output
ROUND = "Resources before job selection"


def scheduling_rounds(folder, limit: str) -> tuple[int, str]:
    """(rounds, whether the cut removed a limiter) of a run of RATE_SNAKEFILE under ``limit``."""
    folder.mkdir()
    (folder / "Snakefile").write_text(RATE_SNAKEFILE)
    result = snakemake(folder, "--cores", "1", "--verbose", "--max-jobs-per-timespan", limit)
    return (result.stdout + result.stderr).count(ROUND), (folder / "dropped.txt").read_text()


def test_snakemakes_default_job_rate_limit_is_dropped_and_its_rounds_with_it(tmp_path):
    """Snakemake's JobScheduler.job_rate_limiter at its default (--max-jobs-per-timespan 100/1s)
    is what the cut removes; with it kept (another rate), waiting jobs cost a round a second."""
    cut, removed = scheduling_rounds(tmp_path / "cut", "{}/{}s".format(*DEFAULT_JOB_RATE))
    kept, left = scheduling_rounds(tmp_path / "kept", "99/1s")
    assert removed == "True", "Snakemake's scheduler has no job_rate_limiter (max_jobs, timespan) at its default rate"
    assert left == "False"
    # a round at the start and one as each job ends
    assert cut <= 5, f"{cut} scheduling rounds for 4 jobs without Snakemake's job_rate_limiter"
    assert kept > cut, (f"Snakemake's job_rate_limiter no longer costs rounds ({kept} kept, {cut} cut): "
                        "the cut (imagenet_cog.core.snakemake_insides) may go")


def test_snakemakes_listing_options_are_its_command_lines():
    """The Snakefile tells a listing run (--list-rules, --lint, ...) by these destinations of
    Snakemake's command-line parser."""
    parser = get_argument_parser()
    destinations = {action.dest for action in parser._actions}
    assert set(LISTING_OPTIONS) <= destinations, f"Snakemake's parser lacks {set(LISTING_OPTIONS) - destinations}"
    assert parser.parse_args(["--list-rules"]).list_rules and not parser.parse_args([]).lint


def test_open_clips_vision_tower_pools_then_projects():
    """models.open_clip_models.pooled_features runs open_clip's VisionTransformer._embeds and
    ._pool: its forward is those, then the projection."""
    torch.manual_seed(0)
    visual = open_clip.create_model("ViT-S-32-alt").visual.eval()
    for name in ("_embeds", "_pool", "transformer", "proj"):
        assert hasattr(visual, name), f"open_clip's VisionTransformer has no {name}"
    images = torch.randn(2, 3, *visual.image_size)
    with torch.inference_mode():
        torch.testing.assert_close(pooled_features(visual, images) @ visual.proj, visual(images), rtol=1e-4, atol=1e-5,
                                   msg="open_clip's VisionTransformer._pool then .proj is not its forward")


def test_torchs_allow_list_of_checkpoint_objects():
    """A checkpoint of torch's pre-1.6 format is scanned by the workflow, then torch's
    weights-only allow-list is subtracted: torch._weights_only_unpickler's _get_allowed_globals
    and _get_user_allowed_globals, names to objects."""
    from torch import _weights_only_unpickler

    for name in ("_get_allowed_globals", "_get_user_allowed_globals"):
        assert callable(getattr(_weights_only_unpickler, name, None)), f"torch._weights_only_unpickler has no {name}"
    assert "collections.OrderedDict" in _weights_only_unpickler._get_allowed_globals()
    with torch.serialization.safe_globals([Trusted]):
        assert f"{__name__}.Trusted" in _weights_only_unpickler._get_user_allowed_globals()


class Trusted:
    pass


def test_a_legacy_checkpoint_names_only_what_torch_does_not_allow(tmp_path):
    path = tmp_path / "legacy.pt"
    torch.save({"state": {"w": torch.zeros(2)}, "extra": Trusted()}, path, _use_new_zipfile_serialization=False)
    assert _legacy_checkpoint_globals(path) == [f"{__name__}.Trusted"]
    with torch.serialization.safe_globals([Trusted]):
        assert _legacy_checkpoint_globals(path) == []


def test_torchs_compiler_errors_are_the_fused_steps_fallback():
    """probes.fused_step falls back to the reference step on torch._dynamo.exc.TorchDynamoException
    and torch._inductor.exc.InductorError, and on nothing else."""
    from torch._dynamo import exc as dynamo_errors
    from torch._inductor import exc as inductor_errors

    assert issubclass(dynamo_errors.TorchDynamoException, Exception), "torch._dynamo.exc has no TorchDynamoException"
    assert hasattr(inductor_errors, "InductorError"), "torch._inductor.exc has no InductorError"
    assert _is_compile_failure(dynamo_errors.TorchDynamoException("unsupported"))
    assert _is_compile_failure(inductor_errors.InductorError(RuntimeError("no compiler"), None))
    assert not _is_compile_failure(RuntimeError("not the compiler"))


def test_every_batch_norm_of_torch_takes_the_recipes_momentum():
    """The fine-tuning sets the momentum of torch's batch norms, named by their public classes:
    every subclass torch.nn has of its private _BatchNorm is one of them."""
    private = {cls for cls in vars(torch.nn).values() if isinstance(cls, type)
               and issubclass(cls, torch.nn.modules.batchnorm._BatchNorm) and not cls.__name__.startswith("Lazy")}
    assert private <= set(BATCH_NORMS), f"torch.nn's batch norms not set: {private - set(BATCH_NORMS)}"
    network = torch.nn.Sequential(torch.nn.BatchNorm1d(3), torch.nn.BatchNorm2d(3), torch.nn.BatchNorm3d(3),
                                  timm.layers.BatchNormAct2d(3))
    set_batch_norm_momentum(network, 0.25)
    assert [module.momentum for module in network] == [0.25] * 4


def test_timms_pooling_norm_and_token_api():
    """models.timm_models reads a ViT's fc_norm (the norm after pooling), its
    forward_intermediates(return_prefix_tokens=...), has_class_token or cls_token, blocks and
    num_prefix_tokens, and a network's head_hidden_size (its pre-logits width)."""
    torch.manual_seed(0)
    vit = timm.create_model("vit_tiny_patch16_224", img_size=32, global_pool="avg", fc_norm=True).eval()
    assert isinstance(getattr(vit, "fc_norm", None), torch.nn.LayerNorm), "timm's VisionTransformer has no fc_norm"
    images = torch.randn(2, 3, 32, 32)
    with torch.inference_mode():
        tokens = vit.forward_features(images)
        expected = vit.forward_head(tokens, pre_logits=True)
        pooled = pooled_norm(vit)(tokens[:, vit.num_prefix_tokens:].mean(1))
    torch.testing.assert_close(pooled, expected, msg="timm's fc_norm is not the norm of the pooled tokens")
    assert token_layout(vit) == (True, len(vit.blocks)), (
        "timm's VisionTransformer: forward_intermediates(return_prefix_tokens), has_class_token or blocks moved")
    mobile = timm.create_model("mobilenetv3_small_050").eval()
    with torch.inference_mode():
        width = mobile.forward_head(mobile.forward_features(images), pre_logits=True).shape[-1]
    assert width == getattr(mobile, "head_hidden_size", None) != mobile.num_features, (
        "timm's head_hidden_size is not the pre-logits width")


# The warm-start server runs a job's exit functions itself (the stdlib's private
# atexit._run_exitfuncs, then os._exit) and unregisters dynamo's exit report
# (torch._dynamo.utils.dump_compile_times); test_warm_start checks that the switch leaves the
# report unrun. Here, as torch leaves it: the report runs at exit (the mark shows it), and
# _run_exitfuncs runs the exit functions once, the last registered first.
EXIT_CHECK = """
import atexit, sys
import torch, torch._dynamo.utils
torch._dynamo.utils.compile_times = lambda **options: open(sys.argv[1], "a").write("dynamo ") and ""
atexit.register(lambda: open(sys.argv[1], "a").write("job "))
atexit._run_exitfuncs()
"""


def test_the_exit_work_the_warm_start_switches_off_and_runs(tmp_path):
    mark = tmp_path / "mark"
    subprocess.run([sys.executable, "-c", EXIT_CHECK, str(mark)], check=True, capture_output=True, text=True)
    assert "dynamo" in mark.read_text(), "torch._dynamo.utils.dump_compile_times no longer runs at exit"
    assert mark.read_text() == "job dynamo ", "the stdlib's atexit._run_exitfuncs runs the exit functions otherwise"


def test_transformers_private_constructor_builds_a_tower_with_its_options():
    """transformers' PreTrainedModel._from_config: hf_models.create builds an image-text model's
    vision tower with it (AutoModel.from_config builds the whole model), in float32, with the
    family's own options (ViTModel's pooler left out where it is not read)."""
    assert hasattr(PreTrainedModel, "_from_config"), "transformers: PreTrainedModel._from_config is gone (hf_models.create)"
    tower = SiglipVisionModel._from_config(SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                                              num_attention_heads=2, image_size=32, patch_size=8),
                                           dtype=torch.float32)
    assert isinstance(tower, SiglipVisionModel) and next(tower.parameters()).dtype == torch.float32, (
        "transformers: PreTrainedModel._from_config no longer builds the class it is called on in the dtype asked")
    vit = ViTModel._from_config(ViTConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                          image_size=32, patch_size=8), dtype=torch.float32, add_pooling_layer=False)
    assert vit.pooler is None, "transformers: PreTrainedModel._from_config no longer passes the model's own options on"


def test_transformers_key_renaming_and_ignored_keys_are_from_pretraineds(tmp_path):
    """transformers.conversion_mapping.get_model_conversion_mapping,
    transformers.core_model_loading.rename_source_key (module level, undocumented) and the class
    attribute PreTrainedModel._keys_to_ignore_on_load_missing: the check before any job
    (hf_models.checkpoint_misfit) renames a checkpoint folder's keys and leaves out the keys a
    network may miss with them, so that it refuses exactly what from_pretrained would not load: a
    task model's folder (keys under vit.) fits a ViTModel, a wider one does not."""
    from transformers import conversion_mapping, core_model_loading

    for module, name in ((conversion_mapping, "get_model_conversion_mapping"), (core_model_loading, "rename_source_key"),
                         (core_model_loading, "WeightRenaming"), (core_model_loading, "WeightConverter")):
        assert hasattr(module, name), f"transformers: {module.__name__}.{name} is gone (hf_models.checkpoint_misfit)"
    assert hasattr(PreTrainedModel, "_keys_to_ignore_on_load_missing"), (
        "transformers: PreTrainedModel._keys_to_ignore_on_load_missing is gone (hf_models.checkpoint_misfit)")
    small = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
             "image_size": 32, "patch_size": 8}
    torch.manual_seed(0)
    ViTForImageClassification(ViTConfig(**small, num_labels=3)).save_pretrained(tmp_path / "task")
    ViTModel(ViTConfig(**small), add_pooling_layer=False).save_pretrained(tmp_path / "base")
    ViTForImageClassification(ViTConfig(**{**small, "hidden_size": 48})).save_pretrained(tmp_path / "wider")
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(tmp_path / "base")
    _, loading = ViTModel.from_pretrained(tmp_path / "task", add_pooling_layer=False, output_loading_info=True)
    assert not loading["missing_keys"], f"transformers {transformers.__version__}: from_pretrained no longer fills a ViTModel from its task model"
    assert checkpoint_misfit_of(tmp_path / "base", tmp_path / "task") is None, (
        "transformers: rename_source_key / get_model_conversion_mapping no longer rename a task model's keys as "
        "from_pretrained does (hf_models.checkpoint_misfit refuses a folder that loads)")
    assert "tensors of other shapes" in checkpoint_misfit_of(tmp_path / "base", tmp_path / "wider"), (
        "transformers: rename_source_key no longer names the network's keys (hf_models.checkpoint_misfit lets a misfit through)")


def checkpoint_misfit_of(base, folder):
    """hf_models.checkpoint_misfit of ``folder`` against the arch of the release ``base``."""
    return checkpoint_misfit(ModelSpec("vit", f"hf/{base}", weights=str(folder)).hf_model(), str(folder))
