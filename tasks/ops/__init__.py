"""Operations over many prefixes: the jobs file, the catalog, the scrub."""
