"""The report sections of the auditor's own concerns (registered in auditor.reports.sections)."""
