"""Root sources: where data enters the warehouse.

:mod:`etl.sources.base` is the contract every source meets (cut a slice, read exactly
it again); :mod:`etl.sources.files`, :mod:`etl.sources.delta_table` and
:mod:`etl.sources.kafka` are the sources.
"""
