"""The paper study: the LAQ paper's experiments, checked, and REPORT.md."""
