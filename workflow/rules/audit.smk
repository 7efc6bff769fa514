# Label-noise audit (paper supp. A.3, Fig. 5): the final N = all classifier of one dataset
# labels the test images of another; confident predictions are listed with both labels. See
# imagenet_cog/variants/audit.py. The classifiers are the probe jobs' files kept beside their result
# JSONs (not rule outputs, so existing probes stay up to date); a missing one is refitted.


rule label_audit:
    input:
        unpack(audit_inputs),
    output:
        predictions=report(
            PATHS.audit_predictions("{model}"),
            caption="../report/audit_predictions.rst",
            category="Label-noise audit",
            subcategory="{model}",
        ),
        shares=report(
            PATHS.audit_shares("{model}"),
            caption="../report/audit_shares.rst",
            category="Label-noise audit",
            subcategory="{model}",
        ),
        contact_sheet=report(
            PATHS.audit_contact_sheet("{model}"),
            caption="../report/audit_contact_sheet.rst",
            category="Label-noise audit",
            subcategory="{model}",
        ),
    log:
        "logs/audit/{model}.log",
    benchmark:
        "logs/benchmarks/audit/{model}.tsv"
    conda:
        CONDA_ENVIRONMENT
    resources:
        mem_mb=8000,
    params:
        # <root>/audit/<model>/confident_predictions.tsv
        root=lambda wildcards, output: os.path.dirname(os.path.dirname(os.path.dirname(output.predictions))),
        options=audit_options(),
        threshold=AUDIT_SETTINGS["threshold"],
        images=AUDIT_SETTINGS["contact_sheet_images"],
        device=config["probes"]["device"],
    shell:
        python_command("label-audit") + " --results-root {params.root} --model {wildcards.model} {params.options}"
        " --concepts {input.concepts} --threshold {params.threshold}"
        " --contact-sheet-images {params.images} --device {params.device}"
        " --predictions {output.predictions} --shares {output.shares}"
        " --contact-sheet {output.contact_sheet} > {log} 2>&1"
