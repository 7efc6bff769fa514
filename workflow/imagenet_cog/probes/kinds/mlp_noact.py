"""The MLP probe without activation (CoG preprint, supp. C.3): its layers compose to a linear
map, trained on the raw features."""

from imagenet_cog.core.naming import MLP_NOACT
from imagenet_cog.probes.kinds.kind import SEARCH_SETTINGS, ProbeKind, mlp_command_settings, mlp_work_factor

KIND = ProbeKind(
    name=MLP_NOACT,
    title="MLP-NoAct",
    settings=(*SEARCH_SETTINGS, "mlp"),
    in_kinds_table=True,
    unused_fields=("pca_dim",),
    trainer_options={"relu": False},
    command_settings=lambda probes, name: mlp_command_settings(probes["mlp"], name, "noact_lr_range"),
    work_factor=mlp_work_factor,
)
