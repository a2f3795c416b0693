"""One folder per benchmark (definition, card.md, README.md); `registry` lists them, one line each."""
