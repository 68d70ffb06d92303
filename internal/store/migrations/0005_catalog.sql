-- The catalog as PlatformCatalogService and TemplateCatalogService keep it:
-- bodies are the API messages (kibotos.operator.v1), with the columns queries
-- filter, order or check references on beside them. deployment_default lives
-- only in its column (one UPDATE moves it between rows), and ctrl fills it into
-- the message it answers.
--
-- The catalog tables of 0003 (launches, platform_keys, template_revisions,
-- templates) held what `kibotos dev` registered before the catalog RPCs, and ctrl
-- adopts their rows into these tables at start and empties them.
CREATE TABLE catalog_platform_keys (
    platform_key        TEXT PRIMARY KEY,
    deployment_default  BIGINT NOT NULL DEFAULT 0,
    body                {{BYTES}} NOT NULL
);
CREATE TABLE catalog_launches (
    launch_ref        TEXT PRIMARY KEY,
    platform_key      TEXT NOT NULL,
    revision          BIGINT NOT NULL,
    kernel_digest     TEXT NOT NULL,
    initramfs_digest  TEXT NOT NULL,
    body              {{BYTES}} NOT NULL
);
CREATE UNIQUE INDEX catalog_launches_revision ON catalog_launches (platform_key, revision);
CREATE TABLE catalog_templates (
    template            TEXT PRIMARY KEY,
    deployment_default  BIGINT NOT NULL DEFAULT 0,
    deleted             BIGINT NOT NULL DEFAULT 0,
    body                {{BYTES}} NOT NULL
);
-- seq numbers a Template's revisions in creation order (newest-first lists
-- page on it), and source_digest is the upload a revision was built from.
CREATE TABLE catalog_template_revisions (
    template       TEXT NOT NULL,
    revision       TEXT NOT NULL,
    seq            BIGINT NOT NULL,
    state          TEXT NOT NULL,
    source_digest  TEXT NOT NULL,
    body           {{BYTES}} NOT NULL,
    PRIMARY KEY (template, revision)
);
CREATE UNIQUE INDEX catalog_template_revisions_seq ON catalog_template_revisions (template, seq);
-- uploads are the content-addressed files UploadPlatformArtifact (kind
-- 'platform') and UploadTemplateSource (kind 'template-source') completed.
CREATE TABLE catalog_uploads (
    kind          TEXT NOT NULL,
    digest        TEXT NOT NULL,
    size_bytes    BIGINT NOT NULL,
    completed_at  BIGINT NOT NULL,
    PRIMARY KEY (kind, digest)
);
