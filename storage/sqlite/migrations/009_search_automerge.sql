-- FTS5 merges a level of the search index once it holds this many segments (its default
-- is 4). Steps are indexed all day in batches, and with 4 the merges took a third of the
-- index's CPU: at 16, indexing a step of the load benchmark costs 6.9 µs instead of 9.2
-- (BenchmarkStepCPU, 400,000 steps), for searches by word 15-25 % slower (0.26 to 0.30 ms
-- for a common word over 300,000 steps; BenchmarkSearch).
INSERT INTO step_search (step_search, rank) VALUES ('automerge', 16);
