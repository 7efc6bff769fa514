# What the run lacks, noted by every stage while the Snakefile is read and refused in one message
# before any job (the Snakefile's refuse_what_the_run_lacks).

# What this run lacks before its jobs can run (an image root, a checkpoint, a published pickle,
# a names table, word vectors): each stage notes its own (note_lack) while the Snakefile is read,
# and the Snakefile refuses them all in one message at its end (refuse_what_the_run_lacks), in
# a dry run as in a real one, before any job or input function meets them one job at a time.
# `snakemake plan` and `snakemake needed_synsets` price a run before its downloads: let through.
RUN_LACKS = {}
PRICING_RULES = ("plan", "needed_synsets")
# the kinds refused also for a listing or named targets: every job of a model reads its checkpoint
MISFITS = "checkpoints that do not fit their arch"
CHECKPOINT_LACKS = ("checkpoints", MISFITS)


def note_lack(kind, name, check, *arguments):
    """``check(*arguments)``, its WorkflowError noted as something the run lacks (``kind``:
    "image roots", "checkpoints", ...; ``name``: which one) rather than raised now."""
    try:
        return check(*arguments)
    except WorkflowError as error:
        note_missing(kind, name, str(error))


def note_missing(kind, name, message):
    RUN_LACKS.setdefault(kind, []).append((name, message))


def command_line_request():
    """The targets (rules or files) the snakemake command names, and whether it only lists or
    draws the workflow (--list-rules, --lint, --rulegraph, ...): Snakemake tells the workflow
    only once the Snakefile is read, too late for one message before any job, so they are read
    from its command line with its own parser."""
    import sys

    from snakemake.cli import get_argument_parser
    from imagenet_cog.core.snakemake_insides import LISTING_OPTIONS

    known, _ = get_argument_parser().parse_known_args(sys.argv[1:])
    listing = any(getattr(known, option, None) for option in LISTING_OPTIONS)
    return set(known.targets), listing


def pricing_only(asked):
    """Whether the targets asked for are the pricing rules' alone."""
    return bool(asked) and asked <= {*PRICING_RULES, PATHS.needed_synsets(), PATHS.needed_synset_tars()}


def refuse_what_the_run_lacks():
    """The whole run is refused for all it lacks; a listing, or named targets (the levels of a
    run whose images are not there yet), only for missing checkpoints (and those that do not fit
    their arch), which every job of a model reads and a listing of the paper's models must name."""
    from imagenet_cog.core.config_check import lacking_message

    if not RUN_LACKS or not workflow.is_main_process:
        return
    asked, listing = command_line_request()
    if pricing_only(asked):
        return
    lacks = (
        RUN_LACKS if not (asked or listing) else {kind: found for kind, found in RUN_LACKS.items() if kind in CHECKPOINT_LACKS}
    )
    if lacks:
        raise WorkflowError(lacking_message(lacks, " and ".join(f"`snakemake {rule}`" for rule in PRICING_RULES)))
