"""The search: the problem (genes -> mapping -> model -> objectives), NSGA-II on arrays, and
the search workflow (:mod:`dse.search.workflow`)."""
