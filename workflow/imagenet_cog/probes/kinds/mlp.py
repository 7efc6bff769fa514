"""The MLP probe (CoG preprint, supp. C.3): hidden layers with ReLU on the raw features."""

from imagenet_cog.core.naming import MLP
from imagenet_cog.probes.kinds.kind import SEARCH_SETTINGS, ProbeKind, mlp_command_settings, mlp_work_factor

KIND = ProbeKind(
    name=MLP,
    title="MLP",
    settings=(*SEARCH_SETTINGS, "mlp"),
    in_kinds_table=True,
    unused_fields=("pca_dim",),
    trainer_options={"relu": True},
    command_settings=lambda probes, name: mlp_command_settings(probes["mlp"], name, "lr_range"),
    work_factor=mlp_work_factor,
)
