"""Fine-tuning stage (workflow/rules/finetune.smk): the control of CoG supp. C.2, Fig. 6, the
whole backbone trained on each dataset, against which the frozen features' linear probe is set."""
