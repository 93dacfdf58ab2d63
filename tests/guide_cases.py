"""Where a user's first question should land in the shipped knowledge trees.

``MATCH_CASES`` rows are (user query, tree id, node id): the node ``initiate_session`` should
start on, ranked first by ``Matcher(entry_candidates(trees))`` over both shipped trees with
a score the engine accepts (0.25, below it the engine falls back to a root). The
Chinese tree (``tech-investment``) is asked in Chinese, English and Russian; its nodes carry
keywords in all three. ``FALLBACK_CASES`` are questions no tree is about: their best score must
stay below the engine's fallback threshold.
"""

TECH = "tech-investment"
INGEST = "ingestion-troubleshooting"

# --- the English tree, in English -----------------------------------------------------------
INGESTION_CASES: list[tuple[str, str, str]] = [
    ("I have a problem with document ingestion in LDIMS", INGEST, "root"),
    ("Something is wrong with my uploaded documents", INGEST, "root"),
    ("My upload has been stuck in processing since this morning", INGEST, "node_processing"),
    ("The content endpoint keeps answering 202, is that normal?", INGEST, "node_processing"),
    (
        "None of my documents get processed, every new upload stays queued",
        INGEST,
        "node_no_workers",
    ),
    ("Is a Celery worker running at all? Flower shows no workers", INGEST, "node_no_workers"),
    ("Ingesting a batch of 10,000 files is very slow, how can I speed it up?", INGEST, "node_slow"),
    ("Why does reading the document give me a 409 error?", INGEST, "node_failed"),
    ("What does the failureCode in the error mean?", INGEST, "node_failed"),
    ("Document failed with ENCRYPTED", INGEST, "node_encrypted"),
    ("My PDF is password protected, can LDIMS read it?", INGEST, "node_encrypted"),
    ("failureCode TOO_LARGE on a 3000-page manual", INGEST, "node_too_large"),
    ("The file has too many pages, which limit do I raise?", INGEST, "node_too_large"),
    ("Extraction took longer than 120 s and the document failed", INGEST, "node_timeout"),
    ("How do I increase the extraction timeout?", INGEST, "node_timeout"),
    ("UNSUPPORTED_FORMAT for a PNG image", INGEST, "node_unsupported_format"),
    ("LDIMS refuses my file type, which formats are supported?", INGEST, "node_unsupported_format"),
    ("Why is my docx reported as CORRUPT_FILE?", INGEST, "node_corrupt"),
    ("The file seems damaged or truncated", INGEST, "node_corrupt"),
    ("A zero-byte file ended as EMPTY_FILE", INGEST, "node_empty"),
    ("Scanned PDF without text fails with NO_TEXT_LAYER", INGEST, "node_no_text_layer"),
    ("Do you run OCR on scanned documents?", INGEST, "node_no_text_layer"),
    ("HOSTILE_FILE on a spreadsheet, is it a zip bomb?", INGEST, "node_hostile"),
    ("WORKER_LOST after the worker was killed by the OOM killer", INGEST, "node_worker_lost"),
    ("The webhook URL was refused with URL_NOT_ALLOWED", INGEST, "node_fetch"),
    ("FETCH_FAILED when the webhook points to our intranet server", INGEST, "node_fetch"),
    ("TIKA_UNAVAILABLE errors on every Office file", INGEST, "node_internal"),
    ("INTERNAL_ERROR: where do I find the traceback?", INGEST, "node_internal"),
    ("How do I retry a failed document?", INGEST, "node_reprocess"),
    ("Re-uploading the same file does nothing", INGEST, "node_reprocess"),
    ("Upload rejected with 413 Request Entity Too Large", INGEST, "node_upload_rejected"),
    ("I get 503 when uploading documents", INGEST, "node_upload_rejected"),
    ("The document is completed but search does not return it", INGEST, "node_not_in_search"),
]

# --- the Chinese tree, in Chinese -----------------------------------------------------------
TECH_ZH_CASES: list[tuple[str, str, str]] = [
    ("我想了解科技行业的投资", TECH, "root"),
    ("现在投资科技股合适吗", TECH, "root"),
    ("人工智能领域有哪些投资机会", TECH, "node_ai"),
    ("AI行业前景怎么样", TECH, "node_ai"),
    ("机器学习相关的公司值得关注吗", TECH, "node_ai"),
    ("GPU芯片市场谁是龙头", TECH, "node_ai_hardware"),
    ("英伟达的显卡业务怎么样", TECH, "node_ai_hardware"),
    ("AI芯片", TECH, "node_ai_hardware"),
    ("芯片", TECH, "node_ai_hardware"),
    ("半导体板块怎么看", TECH, "node_ai_hardware"),
    ("大模型公司有哪些", TECH, "node_ai_software"),
    ("我对AI软件和算法方向感兴趣", TECH, "node_ai_software"),
    ("云计算行业怎么样", TECH, "node_cloud"),
    ("算力", TECH, "node_cloud"),
    ("阿里云和腾讯云哪个好", TECH, "node_cloud_providers"),
    ("亚马逊AWS和微软Azure的市场份额", TECH, "node_cloud_providers"),
    ("数据中心产业链有哪些环节", TECH, "node_cloud_datacenter"),
    ("液冷服务器的需求", TECH, "node_cloud_datacenter"),
    ("光模块", TECH, "node_cloud_datacenter"),
    ("机房", TECH, "node_cloud_datacenter"),
    ("科技股的风险有哪些", TECH, "node_risk"),
    ("芯片出口管制会有什么影响", TECH, "node_risk"),
    ("风险", TECH, "node_risk"),
    ("现在是不是科技泡沫", TECH, "node_risk"),
]

# --- the Chinese tree, in English -----------------------------------------------------------
TECH_EN_CASES: list[tuple[str, str, str]] = [
    ("Is it a good time to invest in tech stocks?", TECH, "root"),
    ("What are the opportunities in artificial intelligence?", TECH, "node_ai"),
    ("Which companies make AI chips?", TECH, "node_ai_hardware"),
    ("Tell me about Nvidia GPUs", TECH, "node_ai_hardware"),
    ("How do large language models make money?", TECH, "node_ai_software"),
    ("Which AI software companies should I look at?", TECH, "node_ai_software"),
    ("cloud computing market outlook", TECH, "node_cloud"),
    ("AWS vs Azure vs Google Cloud", TECH, "node_cloud_providers"),
    ("Are data center stocks a good idea?", TECH, "node_cloud_datacenter"),
    ("What are the risks of investing in technology?", TECH, "node_risk"),
    ("Should I worry about a tech bubble?", TECH, "node_risk"),
]

# --- the Chinese tree, in Russian -----------------------------------------------------------
TECH_RU_CASES: list[tuple[str, str, str]] = [
    ("Стоит ли инвестировать в технологические компании?", TECH, "root"),
    ("Расскажите про искусственный интеллект", TECH, "node_ai"),
    ("Нейросети и машинное обучение — куда вложиться?", TECH, "node_ai"),
    ("Какие компании делают чипы для ИИ?", TECH, "node_ai_hardware"),
    ("Видеокарты Nvidia: кто лидирует?", TECH, "node_ai_hardware"),
    ("Программное обеспечение для ИИ", TECH, "node_ai_software"),
    ("Кто делает большие языковые модели?", TECH, "node_ai_software"),
    ("Перспективы облачных вычислений", TECH, "node_cloud"),
    ("Какой облачный провайдер лучше: Amazon или Microsoft?", TECH, "node_cloud_providers"),
    ("Инвестиции в дата-центры", TECH, "node_cloud_datacenter"),
    ("Серверы и охлаждение для ЦОДов", TECH, "node_cloud_datacenter"),
    ("Какие риски у технологических акций?", TECH, "node_risk"),
]

MATCH_CASES: list[tuple[str, str, str]] = [
    *INGESTION_CASES,
    *TECH_ZH_CASES,
    *TECH_EN_CASES,
    *TECH_RU_CASES,
]

FALLBACK_CASES: list[str] = [
    "what's the weather tomorrow",
    "how do I cook pasta al dente",
    "recommend a good movie for tonight",
    "How do I upload photos to Instagram?",
    "今天天气怎么样",
    "帮我写一首关于春天的诗",
    "Какая завтра погода в Москве?",
    "Как приготовить борщ?",
]
