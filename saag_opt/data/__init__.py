"""Datasets: loaders (BFCL, JSONL, Glaive) -> Example, the registry-size benchmark, splits, the catalog."""

from saag_opt.data.bfcl import bfcl_categories, example_from_bfcl_row, fetch_bfcl, load_bfcl
from saag_opt.data.catalog import (
    DatasetInfo,
    DatasetLoader,
    LoaderInfo,
    dataset_names,
    iter_dataset,
    list_datasets,
    load_dataset,
    loaders,
    register_loader,
)
from saag_opt.data.glaive import (
    iter_glaive,
    iter_glaive_sharegpt,
    load_glaive,
    load_glaive_sharegpt,
    parse_function_call,
)
from saag_opt.data.jsonl import (
    RowResult,
    iter_bfcl_jsonl,
    iter_examples_jsonl,
    iter_jsonl,
    load_bfcl_jsonl,
    load_examples_jsonl,
    load_jsonl,
    write_bfcl_rows,
    write_examples,
)
from saag_opt.data.registry_bench import build_registry_benchmark, function_pool, mean_similarity
from saag_opt.data.splits import SPLITS, assign_splits, base_id, split_hash, split_of

__all__ = [
    "SPLITS",
    "DatasetInfo",
    "DatasetLoader",
    "LoaderInfo",
    "RowResult",
    "assign_splits",
    "base_id",
    "bfcl_categories",
    "build_registry_benchmark",
    "dataset_names",
    "example_from_bfcl_row",
    "fetch_bfcl",
    "function_pool",
    "iter_bfcl_jsonl",
    "iter_dataset",
    "iter_examples_jsonl",
    "iter_glaive",
    "iter_glaive_sharegpt",
    "iter_jsonl",
    "list_datasets",
    "load_bfcl",
    "load_bfcl_jsonl",
    "load_dataset",
    "load_examples_jsonl",
    "load_glaive",
    "load_glaive_sharegpt",
    "load_jsonl",
    "loaders",
    "mean_similarity",
    "parse_function_call",
    "register_loader",
    "split_hash",
    "split_of",
    "write_bfcl_rows",
    "write_examples",
]
