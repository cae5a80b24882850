-- 3: full-text search over illustrations. Where SQLite keeps an FTS5 table, PostgreSQL indexes one weighted
-- tsvector expression (GIN): subjects, figures and symbols weigh most (A), then the description (B), then the
-- museum description (C), as the FTS5 BM25 weights do. The 'simple' configuration folds case and keeps every
-- word of every language (no stemming, no stop words), as unicode61 does; imagesvc_fold removes diacritics first
-- (unaccent, a trusted extension shipped with PostgreSQL), as FTS5's remove_diacritics does.
CREATE EXTENSION IF NOT EXISTS unaccent;
CREATE FUNCTION imagesvc_fold(value TEXT) RETURNS TEXT
    LANGUAGE SQL IMMUTABLE PARALLEL SAFE AS $$
    SELECT unaccent('unaccent'::regdictionary, coalesce(value, ''))
$$;
CREATE FUNCTION imagesvc_illustration_doc(
    description TEXT, museum_description TEXT, subjects TEXT, figures TEXT, symbols TEXT
) RETURNS tsvector LANGUAGE SQL IMMUTABLE PARALLEL SAFE AS $$
    SELECT setweight(to_tsvector('simple'::regconfig, imagesvc_fold(coalesce(subjects, '') || ' '
                                 || coalesce(figures, '') || ' ' || coalesce(symbols, ''))), 'A')
        || setweight(to_tsvector('simple'::regconfig, imagesvc_fold(description)), 'B')
        || setweight(to_tsvector('simple'::regconfig, imagesvc_fold(museum_description)), 'C')
$$;
CREATE INDEX illustrations_search ON illustrations
    USING gin (imagesvc_illustration_doc(description, museum_description, subjects, figures, symbols));
