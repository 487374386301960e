"""The normative spec as package data: `importlib.resources.files("kvconform.spec")` lists the Markdown files."""
