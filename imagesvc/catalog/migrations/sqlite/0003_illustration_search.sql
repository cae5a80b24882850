-- 3: full-text search over illustrations (external content: the FTS table stores only its index), kept in step
-- with the illustrations table by triggers, so ingest and operator writes need not know it exists.
CREATE VIRTUAL TABLE illustrations_fts USING fts5(
    description, museum_description, subjects, figures, symbols,
    content='illustrations', content_rowid='rowid', tokenize='unicode61 remove_diacritics 2'
);
CREATE TRIGGER illustrations_fts_ai AFTER INSERT ON illustrations BEGIN
    INSERT INTO illustrations_fts (rowid, description, museum_description, subjects, figures, symbols)
    VALUES (new.rowid, new.description, new.museum_description, new.subjects, new.figures, new.symbols);
END;
CREATE TRIGGER illustrations_fts_ad AFTER DELETE ON illustrations BEGIN
    INSERT INTO illustrations_fts (illustrations_fts, rowid, description, museum_description, subjects, figures,
        symbols)
    VALUES ('delete', old.rowid, old.description, old.museum_description, old.subjects, old.figures, old.symbols);
END;
CREATE TRIGGER illustrations_fts_au AFTER UPDATE OF description, museum_description, subjects, figures, symbols
ON illustrations BEGIN
    INSERT INTO illustrations_fts (illustrations_fts, rowid, description, museum_description, subjects, figures,
        symbols)
    VALUES ('delete', old.rowid, old.description, old.museum_description, old.subjects, old.figures, old.symbols);
    INSERT INTO illustrations_fts (rowid, description, museum_description, subjects, figures, symbols)
    VALUES (new.rowid, new.description, new.museum_description, new.subjects, new.figures, new.symbols);
END;
INSERT INTO illustrations_fts (illustrations_fts) VALUES ('rebuild');
