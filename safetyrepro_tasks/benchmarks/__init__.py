"""One module per benchmark; `registry` maps names to definitions."""
