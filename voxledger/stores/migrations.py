"""The catalog's schema as an ordered list of named migrations, recorded in the database.

Never edit a migration that has shipped: append a new one. ``Catalog.migrate`` applies the
missing ones in order inside a transaction and records each by name.
"""

from __future__ import annotations

MIGRATIONS: list[tuple[str, str]] = [
    (
        "0001_core",
        """
        CREATE TABLE receipts (
            receipt_sha256 VARCHAR PRIMARY KEY,
            kind VARCHAR NOT NULL,
            schema_version INTEGER NOT NULL,
            flow VARCHAR NOT NULL,
            task VARCHAR NOT NULL,
            status VARCHAR NOT NULL,
            started_at TIMESTAMPTZ NOT NULL,
            finished_at TIMESTAMPTZ NOT NULL,
            cache_key VARCHAR,
            doc JSON NOT NULL
        );
        CREATE TABLE artifacts (
            sha256 VARCHAR PRIMARY KEY,
            size_bytes BIGINT NOT NULL,
            media_type VARCHAR NOT NULL
        );
        -- One graph over artifacts and receipts: input -> receipt, receipt -> output.
        CREATE TABLE edges (
            src VARCHAR NOT NULL,
            dst VARCHAR NOT NULL,
            role VARCHAR NOT NULL,
            direction VARCHAR NOT NULL,   -- 'input' (src is read by receipt dst) or 'output'
            src_ref VARCHAR NOT NULL,     -- 'artifact' or 'receipt'
            PRIMARY KEY (src, dst, role, direction)
        );
        CREATE INDEX edges_src ON edges (src);
        CREATE INDEX edges_dst ON edges (dst);
        CREATE INDEX receipts_cache_key ON receipts (cache_key);
        CREATE INDEX receipts_kind ON receipts (kind);
        """,
    ),
    (
        "0002_aliases",
        """
        CREATE TABLE alias_history (
            receipt_sha256 VARCHAR NOT NULL,
            alias VARCHAR NOT NULL,
            target_sha256 VARCHAR NOT NULL,
            previous_sha256 VARCHAR,
            moved_at TIMESTAMPTZ NOT NULL,
            reason VARCHAR NOT NULL,
            PRIMARY KEY (receipt_sha256, alias)
        );
        CREATE VIEW aliases AS
            SELECT alias, arg_max(target_sha256, moved_at) AS target_sha256,
                   arg_max(receipt_sha256, moved_at) AS receipt_sha256, max(moved_at) AS moved_at
            FROM alias_history GROUP BY alias;
        """,
    ),
    (
        "0003_audit",
        """
        CREATE TABLE audit_findings (
            receipt_sha256 VARCHAR NOT NULL,
            seq INTEGER NOT NULL,
            code VARCHAR NOT NULL,
            severity VARCHAR NOT NULL,
            utterance_ids VARCHAR[] NOT NULL,
            message VARCHAR NOT NULL,
            value DOUBLE,
            bound DOUBLE,
            file VARCHAR,
            line INTEGER,
            PRIMARY KEY (receipt_sha256, seq)
        );
        CREATE TABLE audits (
            receipt_sha256 VARCHAR NOT NULL,
            corpus_name VARCHAR NOT NULL,
            verdict VARCHAR NOT NULL,
            manifest_sha256 VARCHAR NOT NULL,
            PRIMARY KEY (receipt_sha256)
        );
        """,
    ),
    (
        "0004_equivalence",
        """
        CREATE TABLE equivalence_stages (
            receipt_sha256 VARCHAR NOT NULL,
            stage VARCHAR NOT NULL,
            kind VARCHAR NOT NULL,
            band VARCHAR NOT NULL,
            rel DOUBLE,
            max_abs_err DOUBLE,
            mean_abs_err DOUBLE,
            reference_runtime VARCHAR NOT NULL,
            candidate_runtime VARCHAR NOT NULL,
            PRIMARY KEY (receipt_sha256, stage)
        );
        """,
    ),
    (
        "0005_training",
        """
        CREATE TABLE training_epochs (
            receipt_sha256 VARCHAR NOT NULL,
            run_key VARCHAR NOT NULL,
            plan_sha256 VARCHAR NOT NULL,
            backend VARCHAR NOT NULL,
            mode VARCHAR NOT NULL,
            epoch INTEGER NOT NULL,
            steps INTEGER NOT NULL,
            global_step INTEGER NOT NULL,
            train_loss DOUBLE NOT NULL,
            cv_loss DOUBLE NOT NULL,
            grad_norm_mean DOUBLE NOT NULL,
            lr_end DOUBLE NOT NULL,
            frames_per_s DOUBLE NOT NULL,
            utterances_per_s DOUBLE NOT NULL,
            wall_s DOUBLE NOT NULL,
            checkpoint_overhead_s DOUBLE NOT NULL,
            is_best BOOLEAN NOT NULL,
            PRIMARY KEY (receipt_sha256, epoch)
        );
        CREATE TABLE checkpoints (
            receipt_sha256 VARCHAR PRIMARY KEY,
            run_key VARCHAR NOT NULL,
            epoch INTEGER NOT NULL,
            cv_loss DOUBLE NOT NULL,
            tree_sha256 VARCHAR NOT NULL
        );
        """,
    ),
    (
        "0006_evaluation",
        """
        CREATE TABLE generations (
            receipt_sha256 VARCHAR NOT NULL,
            candidate VARCHAR NOT NULL,
            prompt_id VARCHAR NOT NULL,
            seed INTEGER NOT NULL,
            valid BOOLEAN NOT NULL,
            audio_sha256 VARCHAR,
            duration_s DOUBLE,
            wall_s DOUBLE,
            rtf DOUBLE,
            peak_rss_mb DOUBLE,
            error VARCHAR,
            PRIMARY KEY (receipt_sha256, candidate, prompt_id, seed)
        );
        CREATE TABLE observations (
            receipt_sha256 VARCHAR NOT NULL,
            plan_sha256 VARCHAR NOT NULL,
            candidate VARCHAR NOT NULL,
            prompt_id VARCHAR NOT NULL,
            category VARCHAR NOT NULL,
            seed INTEGER NOT NULL,
            metric VARCHAR NOT NULL,
            value DOUBLE NOT NULL,
            extractor_sha256 VARCHAR NOT NULL,
            PRIMARY KEY (receipt_sha256, candidate, prompt_id, seed, metric)
        );
        CREATE TABLE evaluation_summaries (
            receipt_sha256 VARCHAR NOT NULL,
            plan_name VARCHAR NOT NULL,
            candidate VARCHAR NOT NULL,
            category VARCHAR NOT NULL,
            metric VARCHAR NOT NULL,
            mean DOUBLE NOT NULL,
            low DOUBLE NOT NULL,
            high DOUBLE NOT NULL,
            n INTEGER NOT NULL,
            PRIMARY KEY (receipt_sha256, candidate, category, metric)
        );
        CREATE TABLE evaluation_comparisons (
            receipt_sha256 VARCHAR NOT NULL,
            candidate VARCHAR NOT NULL,
            baseline VARCHAR NOT NULL,
            metric VARCHAR NOT NULL,
            delta DOUBLE NOT NULL,
            low DOUBLE NOT NULL,
            high DOUBLE NOT NULL,
            wilcoxon_p DOUBLE,
            n_pairs INTEGER NOT NULL,
            lower_is_better BOOLEAN NOT NULL,
            PRIMARY KEY (receipt_sha256, candidate, metric)
        );
        """,
    ),
    (
        "0007_alias_base",
        """
        ALTER TABLE alias_history ADD COLUMN base_sha256 VARCHAR;
        CREATE TABLE promotion_rules (
            receipt_sha256 VARCHAR NOT NULL,
            challenger VARCHAR NOT NULL,
            metric VARCHAR NOT NULL,
            statistic VARCHAR NOT NULL,
            op VARCHAR NOT NULL,
            threshold DOUBLE NOT NULL,
            value DOUBLE,
            passed BOOLEAN NOT NULL,
            PRIMARY KEY (receipt_sha256, challenger, metric, statistic)
        );
        """,
    ),
    (
        "0008_listening",
        """
        -- One row per accepted rating of a listening test, unblinded at aggregation and bound to
        -- the audio digest, so lineage walks from a rating back to the audio and what made it.
        CREATE TABLE ratings (
            receipt_sha256 VARCHAR NOT NULL,
            seq INTEGER NOT NULL,
            rater VARCHAR NOT NULL,
            stimulus VARCHAR NOT NULL,
            trial VARCHAR NOT NULL,
            role VARCHAR NOT NULL,
            task VARCHAR NOT NULL,
            criterion VARCHAR NOT NULL,
            candidate VARCHAR NOT NULL,
            prompt_id VARCHAR NOT NULL,
            category VARCHAR NOT NULL,
            score DOUBLE NOT NULL,
            audio_sha256 VARCHAR NOT NULL,
            versus_candidate VARCHAR,
            versus_audio_sha256 VARCHAR,
            included BOOLEAN NOT NULL,
            PRIMARY KEY (receipt_sha256, seq)
        );
        CREATE INDEX ratings_audio ON ratings (audio_sha256);
        CREATE TABLE listening_scores (
            receipt_sha256 VARCHAR NOT NULL,
            criterion VARCHAR NOT NULL,
            task VARCHAR NOT NULL,
            candidate VARCHAR NOT NULL,
            ratings INTEGER NOT NULL,
            raters INTEGER NOT NULL,
            mean DOUBLE NOT NULL,
            ci_low DOUBLE,
            ci_high DOUBLE,
            PRIMARY KEY (receipt_sha256, criterion, candidate)
        );
        """,
    ),
    (
        "0009_packages",
        """
        CREATE TABLE packages (
            receipt_sha256 VARCHAR PRIMARY KEY,
            status VARCHAR NOT NULL,
            package_sha256 VARCHAR NOT NULL,
            size_bytes BIGINT NOT NULL,
            backend VARCHAR NOT NULL,
            training_run VARCHAR NOT NULL,
            checkpoint_tree_sha256 VARCHAR NOT NULL,
            base_sha256 VARCHAR,
            merged_tree_sha256 VARCHAR,
            reload_bitwise_equal BOOLEAN NOT NULL,
            reload_max_abs_err DOUBLE NOT NULL,
            equivalence_band VARCHAR,
            equivalence_receipt VARCHAR,
            published_name VARCHAR,
            finished_at TIMESTAMPTZ NOT NULL
        );
        CREATE INDEX packages_package ON packages (package_sha256);
        """,
    ),
    (
        "0010_pipeline",
        """
        CREATE TABLE pipeline_stages (
            receipt_sha256 VARCHAR NOT NULL,
            run_status VARCHAR NOT NULL,
            finished_at TIMESTAMPTZ NOT NULL,
            seq INTEGER NOT NULL,
            stage VARCHAR NOT NULL,
            stage_receipt VARCHAR,
            cached BOOLEAN NOT NULL,
            wall_s DOUBLE NOT NULL,
            status VARCHAR NOT NULL,
            detail VARCHAR NOT NULL,
            PRIMARY KEY (receipt_sha256, seq)
        );
        """,
    ),
    (
        "0011_provenance",
        """
        CREATE TABLE audit_speakers (
            receipt_sha256 VARCHAR NOT NULL,
            speaker VARCHAR NOT NULL,
            utterances INTEGER NOT NULL,
            hours DOUBLE NOT NULL,
            PRIMARY KEY (receipt_sha256, speaker)
        );
        CREATE TABLE evaluation_extractors (
            receipt_sha256 VARCHAR NOT NULL,
            extractor VARCHAR NOT NULL,
            extractor_sha256 VARCHAR NOT NULL,
            spec JSON NOT NULL,
            PRIMARY KEY (receipt_sha256, extractor)
        );
        """,
    ),
    (
        "0012_interval_units",
        """
        ALTER TABLE evaluation_summaries ALTER COLUMN low DROP NOT NULL;
        ALTER TABLE evaluation_summaries ALTER COLUMN high DROP NOT NULL;
        ALTER TABLE evaluation_summaries ADD COLUMN method VARCHAR;
        ALTER TABLE evaluation_summaries ADD COLUMN units INTEGER;
        ALTER TABLE evaluation_comparisons ALTER COLUMN low DROP NOT NULL;
        ALTER TABLE evaluation_comparisons ALTER COLUMN high DROP NOT NULL;
        ALTER TABLE evaluation_comparisons RENAME COLUMN wilcoxon_p TO p_value;
        ALTER TABLE evaluation_comparisons ADD COLUMN interval_method VARCHAR;
        ALTER TABLE evaluation_comparisons ADD COLUMN test_method VARCHAR;
        ALTER TABLE evaluation_comparisons ADD COLUMN units INTEGER;
        """,
    ),
    (
        "0013_audit_speaker_splits",
        """
        CREATE TABLE audit_speaker_splits (
            receipt_sha256 VARCHAR NOT NULL,
            speaker VARCHAR NOT NULL,
            split VARCHAR NOT NULL,
            utterances INTEGER NOT NULL,
            PRIMARY KEY (receipt_sha256, speaker, split)
        );
        """,
    ),
    (
        "0014_catalog_sums",
        """
        CREATE TABLE catalog_sums (
            name VARCHAR PRIMARY KEY,
            row_count BIGINT NOT NULL,
            digest HUGEINT NOT NULL,
            duckdb_version VARCHAR NOT NULL
        );
        """,
    ),
    (
        "0015_model_lines",
        """
        -- Aliases belong to a model line (VOICE/BACKEND), not to the whole home. A move written before
        -- lines joins its training run's line (the promotion projector derives it the same way, so a
        -- rebuild agrees); a run that is not in the catalog leaves it on 'unknown/unknown'.
        ALTER TABLE alias_history ADD COLUMN line VARCHAR;
        UPDATE alias_history SET line = coalesce((
            SELECT coalesce(t.doc->>'$.parameters.effective_config.plan.new_speaker', 'base') || '/' || (t.doc->>'$.parameters.backend')
            FROM receipts p JOIN receipts t ON t.receipt_sha256 = p.doc->>'$.parameters.training_run'
            WHERE p.receipt_sha256 = alias_history.receipt_sha256 AND t.kind = 'training_run'
        ), 'unknown/unknown');
        DROP VIEW aliases;
        CREATE VIEW aliases AS
            SELECT line, alias, arg_max(target_sha256, moved_at) AS target_sha256,
                   arg_max(receipt_sha256, moved_at) AS receipt_sha256, max(moved_at) AS moved_at
            FROM alias_history GROUP BY line, alias;
        CREATE VIEW model_lines AS
            SELECT line, min(moved_at) AS first_moved_at, max(moved_at) AS last_moved_at, count(*) AS moves
            FROM alias_history GROUP BY line;
        """,
    ),
]
