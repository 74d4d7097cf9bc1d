"""What is declared and who may act: tools and their policies (`tools`, the tool file
`toolfile`), agents' keys and their last use, the configuration version that tells every
process when to forget what it remembers, and the people's roles."""
