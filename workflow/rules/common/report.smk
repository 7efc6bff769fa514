import os

# A rule's outputs in the report (snakemake --report): captions are files of workflow/report/.
REPORT_CAPTIONS = os.path.join(workflow.basedir, "workflow", "report")


def report_output(path, caption, category, subcategory=None, labels=None):
    """``path`` registered for the report with its caption file (named relative to the rule
    file being read, as Snakemake resolves it), category, subcategory and labels."""
    rule_folder = workflow.current_basedir.get_path_or_uri(secret_free=False)
    caption_file = os.path.relpath(os.path.join(REPORT_CAPTIONS, caption), rule_folder)
    return report(path, caption=caption_file, category=category, subcategory=subcategory, labels=labels)


def tidy_report(path, caption, table, subcategory):
    """A report entry for a table other than the paper's tables (results, zero-shot)."""
    return report_output(
        path,
        caption=caption,
        category="Tables",
        subcategory=subcategory,
        labels={"table": table, "dataset": "all"},
    )


def figure_report(name, caption):
    return report_output(
        PATHS.figure(name, "png"),
        caption=caption,
        category="Figures",
        labels={"figure": name},
    )


def results_root(wildcards, output):
    """The results folder of a job writing tables or figures, from its first output (<root>/tables/.. or
    <root>/figures/..): where its command writes the rest."""
    return os.path.dirname(os.path.dirname(output[0]))
