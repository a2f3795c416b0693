"""Rendering: the report (Markdown and HTML), the GRID card, the figures, the output folder written whole, and what
`verdict` and `compare` print.
"""
