//! Benchmark prompts: each run of a cell gets its own prompt (and seed), so nothing learned from
//! an earlier request can replay a reply. Index 0 of each list is the warm-up.

/// Raw completion prompts of Python source.
pub const CODE: [&str; 6] = [
    "import os\n\n\ndef list_files(root):\n    \"\"\"Return every file path under root, recursively.\"\"\"\n",
    "from dataclasses import dataclass\n\n\n@dataclass\nclass Point:\n    x: float\n    y: float\n\n    def distance(self, other: \"Point\") -> float:\n",
    "def merge_sorted(a, b):\n    \"\"\"Merge two sorted lists into one sorted list.\"\"\"\n    result = []\n    i = j = 0\n",
    "import json\n\n\nclass Config:\n    def __init__(self, path):\n        self.path = path\n        self.data = {}\n\n    def load(self):\n",
    "def parse_csv_line(line, sep=','):\n    \"\"\"Split one CSV line, honouring double quotes.\"\"\"\n    fields = []\n    current = ''\n    in_quotes = False\n",
    "import heapq\n\n\ndef dijkstra(graph, start):\n    \"\"\"Shortest distances from start in a weighted graph given as {node: [(nbr, w)]}.\"\"\"\n",
];

/// Chat questions (the template adds the system prompt).
pub const CHAT: [&str; 6] = [
    "What is a closure in programming?",
    "Explain the difference between a process and a thread.",
    "How does a hash table handle collisions?",
    "What are the advantages of immutable data structures?",
    "Describe how TCP ensures reliable delivery.",
    "What is the purpose of a write-ahead log in a database?",
];

/// Code to edit, with the small change asked for (the agent workload: most of the reply copies
/// the input).
pub const EDIT: [(&str, &str); 6] = [
    (
        EDIT_INVENTORY,
        "Rename the method `add_item` to `insert_item` everywhere.",
    ),
    (
        EDIT_INVENTORY,
        "Change the default `low_stock_threshold` from 5 to 10.",
    ),
    (
        EDIT_SCHEDULER,
        "Rename the class `TaskScheduler` to `JobScheduler`.",
    ),
    (
        EDIT_SCHEDULER,
        "Make `max_retries` default to 5 instead of 3.",
    ),
    (EDIT_INVENTORY, "Add type hints `-> None` to `remove_item`."),
    (
        EDIT_SCHEDULER,
        "Rename the variable `pending` to `queue` everywhere.",
    ),
];

const EDIT_INVENTORY: &str = r#"class Inventory:
    def __init__(self, low_stock_threshold=5):
        self.items = {}
        self.low_stock_threshold = low_stock_threshold

    def add_item(self, name, quantity, price):
        if quantity <= 0:
            raise ValueError("quantity must be positive")
        if name in self.items:
            self.items[name]["quantity"] += quantity
            self.items[name]["price"] = price
        else:
            self.items[name] = {"quantity": quantity, "price": price}

    def remove_item(self, name, quantity):
        if name not in self.items:
            raise KeyError(name)
        item = self.items[name]
        if item["quantity"] < quantity:
            raise ValueError("not enough stock")
        item["quantity"] -= quantity
        if item["quantity"] == 0:
            del self.items[name]

    def total_value(self):
        return sum(i["quantity"] * i["price"] for i in self.items.values())

    def low_stock(self):
        return [n for n, i in self.items.items() if i["quantity"] < self.low_stock_threshold]

    def report(self):
        lines = []
        for name, item in sorted(self.items.items()):
            lines.append(f"{name}: {item['quantity']} @ {item['price']:.2f}")
        lines.append(f"total: {self.total_value():.2f}")
        return "\n".join(lines)
"#;

const EDIT_SCHEDULER: &str = r#"import time


class TaskScheduler:
    def __init__(self, max_retries=3, delay=0.5):
        self.max_retries = max_retries
        self.delay = delay
        self.pending = []
        self.done = []
        self.failed = []

    def submit(self, name, func, *args):
        self.pending.append({"name": name, "func": func, "args": args, "tries": 0})

    def run_once(self):
        still_pending = []
        for task in self.pending:
            try:
                task["func"](*task["args"])
                self.done.append(task["name"])
            except Exception as exc:
                task["tries"] += 1
                if task["tries"] >= self.max_retries:
                    self.failed.append((task["name"], str(exc)))
                else:
                    still_pending.append(task)
        self.pending = still_pending

    def run(self):
        while self.pending:
            self.run_once()
            if self.pending:
                time.sleep(self.delay)
        return {"done": self.done, "failed": self.failed}
"#;

/// The chat messages of an edit request.
pub fn edit_message(i: usize) -> String {
    let (code, change) = EDIT[i % EDIT.len()];
    format!("{change} Reply with the complete updated code only.\n\n```python\n{code}```")
}
