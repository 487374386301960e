"""Reports rendered from results.jsonl: report.json (versioned schema), report.md, report.html, junit.xml."""
