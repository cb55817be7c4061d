-- Search attributes (docs/search-attributes.md): an execution's indexed
-- values, one row per attribute, its value in the column of its type: a
-- keyword or bool in keyword, an int or double in num, a time in ts.
-- Each column has an index by name and value, with the execution, so
-- that a filter on one attribute probes an index whatever the table's
-- size; the rows go with their execution when it is pruned.
CREATE TABLE search_attributes (
    execution_id uuid NOT NULL,
    name         text NOT NULL,
    keyword      text,
    num          double precision,
    ts           timestamptz,
    PRIMARY KEY (execution_id, name)
);
CREATE INDEX search_attributes_keyword ON search_attributes (name, keyword, execution_id) WHERE keyword IS NOT NULL;
CREATE INDEX search_attributes_num ON search_attributes (name, num, execution_id) WHERE num IS NOT NULL;
CREATE INDEX search_attributes_ts ON search_attributes (name, ts, execution_id) WHERE ts IS NOT NULL;
