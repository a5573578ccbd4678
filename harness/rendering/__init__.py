"""How a report writes numbers, tables and figures: the parts every report section is made of.

markdown (tables, literal stars), metrics_table (the prepared metrics table, number formatting, means with intervals),
figure_parts (figures, panels, mean bands, saving), bands (bootstrap bands). They sit below the mechanisms so that a
mechanism's own report section (`harness.grid.report_section.MechanismReport`), built in or a lab's, is written with
the same parts as the rest of the report.
"""
