//! The static cost kube-apiserver estimates for a CEL validation rule when a CRD is created or
//! updated: cel-go's checker estimate (every identifier, field selection and call counts; string
//! work at a tenth per byte; regular expressions at a quarter per pattern byte times the string;
//! comprehensions multiply their body by the range's worst-case size) with the Kubernetes
//! library's estimates for its string and list functions, sizes read from the schema through
//! [`Decl`].
//!
//! The rule is type-checked as far as the estimate needs (which overload a call picks, which
//! element a loop variable is); a field the schema does not have, or a rule that is not a
//! boolean, is a compilation error as on the server. A function this model does not know is an
//! error too, never a guess.

use std::collections::HashMap;

use kube_cel::cel::IdedExpr;
use kube_cel::cel::common::ast::{CallExpr, ComprehensionExpr, Expr, LiteralValue, SelectExpr};

use super::decl::{Decl, DeclKind};

/// cel-go's cost of string traversal per byte.
const STRING_TRAVERSAL_COST_FACTOR: f64 = 0.1;
/// cel-go's guess of regex cost per pattern byte.
const REGEX_STRING_LENGTH_COST_FACTOR: f64 = 0.25;
const LIST_CREATE_BASE_COST: u64 = 10;
const MAP_CREATE_BASE_COST: u64 = 30;
const STRUCT_CREATE_BASE_COST: u64 = 40;
/// The accumulator the parser's macros use; paths through it are not handed to estimators.
const ACCUMULATOR: &str = "@result";

/// A `[min, max]` estimate of a cost or a size, saturating at `u64::MAX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Estimate {
    /// Lower bound.
    pub min: u64,
    /// Upper bound.
    pub max: u64,
}

impl Estimate {
    /// `[n, n]`.
    pub const fn fixed(n: u64) -> Estimate {
        Estimate { min: n, max: n }
    }

    const UNKNOWN: Estimate = Estimate {
        min: 0,
        max: u64::MAX,
    };

    fn add(self, o: Estimate) -> Estimate {
        Estimate {
            min: self.min.saturating_add(o.min),
            max: self.max.saturating_add(o.max),
        }
    }

    fn multiply(self, o: Estimate) -> Estimate {
        Estimate {
            min: self.min.saturating_mul(o.min),
            max: self.max.saturating_mul(o.max),
        }
    }

    fn by_factor(self, factor: f64) -> Estimate {
        Estimate {
            min: by_factor(self.min, factor),
            max: by_factor(self.max, factor),
        }
    }

    fn union(self, o: Estimate) -> Estimate {
        Estimate {
            min: self.min.min(o.min),
            max: self.max.max(o.max),
        }
    }
}

/// `x * factor` rounded up, saturating (cel-go's `multiplyByCostFactor`).
fn by_factor(x: u64, factor: f64) -> u64 {
    let product = (x as f64 * factor).ceil();
    if product >= 18_446_744_073_709_551_616.0 {
        u64::MAX
    } else {
        product as u64
    }
}

/// Why a rule's cost could not be estimated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CostError {
    /// The rule does not parse or type-check, as the server would report it.
    #[error("compilation failed: {0}")]
    Compile(String),
    /// The rule is not a boolean expression.
    #[error("cel expression must evaluate to a bool")]
    NotBool,
    /// A function this model has no estimate for.
    #[error("no cost model for CEL function {0:?}")]
    UnknownFunction(String),
}

/// What the estimate found for one rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleCost {
    /// The worst-case cost of one evaluation.
    pub max_cost: u64,
    /// The rule reads `oldSelf` (a transition rule).
    pub uses_old_self: bool,
}

/// The type of an expression, as far as cost estimation needs it.
#[derive(Debug, Clone, PartialEq)]
enum Ty<'d> {
    Bool,
    Int,
    Uint,
    Double,
    String,
    Bytes,
    Null,
    Duration,
    Timestamp,
    List(Box<Ty<'d>>),
    Map(Box<Ty<'d>>, Box<Ty<'d>>),
    /// A schema object (a struct to cel-go).
    Object(&'d Decl),
    Dyn,
}

impl<'d> Ty<'d> {
    fn of(decl: &'d Decl) -> Ty<'d> {
        match &decl.kind {
            DeclKind::Bool => Ty::Bool,
            DeclKind::Int => Ty::Int,
            DeclKind::Double => Ty::Double,
            DeclKind::String => Ty::String,
            DeclKind::Bytes => Ty::Bytes,
            DeclKind::Duration => Ty::Duration,
            DeclKind::Timestamp => Ty::Timestamp,
            DeclKind::Dyn => Ty::Dyn,
            DeclKind::List(item) => Ty::List(Box::new(Ty::of(item))),
            DeclKind::Map(key, value) => Ty::Map(Box::new(Ty::of(key)), Box::new(Ty::of(value))),
            DeclKind::Object(_) => Ty::Object(decl),
        }
    }

    /// Scalars have a known size of one (cel-go's `isScalar`).
    fn is_scalar(&self) -> bool {
        matches!(
            self,
            Ty::Bool | Ty::Int | Ty::Uint | Ty::Double | Ty::Duration | Ty::Timestamp
        )
    }

    /// The more specific of two types that must agree (the other when one is `dyn`).
    fn join(self, other: Ty<'d>) -> Ty<'d> {
        match (self, other) {
            (Ty::Dyn, t) | (t, Ty::Dyn) => t,
            (Ty::List(a), Ty::List(b)) => Ty::List(Box::new(a.join(*b))),
            (a, _) => a,
        }
    }
}

/// The size of a container literal's keys (or indices) and values.
#[derive(Debug, Clone, Copy, PartialEq)]
struct EntrySize {
    is_list: bool,
    key: Estimate,
    value: Estimate,
}

impl EntrySize {
    fn union(self, o: EntrySize) -> EntrySize {
        EntrySize {
            is_list: self.is_list,
            key: self.key.union(o.key),
            value: self.value.union(o.value),
        }
    }
}

/// A variable bound by a comprehension.
#[derive(Debug, Clone)]
struct Local<'d> {
    path: Vec<String>,
    size: Option<Estimate>,
    entry: Option<EntrySize>,
    ty: Ty<'d>,
}

/// What a call's cost computation knows of an argument (cel-go's `AstNode`).
#[derive(Debug, Clone)]
struct Node<'d> {
    path: Vec<String>,
    ty: Ty<'d>,
    /// Its size as far as the expression and the schema tell.
    size: Option<Estimate>,
    /// An integer literal's value (`split`'s limit).
    int_literal: Option<i64>,
}

/// A call's estimate and the size of what it returns.
struct CallEstimate {
    cost: Estimate,
    result_size: Option<Estimate>,
}

impl CallEstimate {
    fn cost(cost: Estimate) -> CallEstimate {
        CallEstimate {
            cost,
            result_size: None,
        }
    }
}

struct Coster<'d> {
    root: &'d Decl,
    paths: HashMap<u64, Vec<String>>,
    sizes: HashMap<u64, Estimate>,
    entry_sizes: HashMap<u64, EntrySize>,
    types: HashMap<u64, Ty<'d>>,
    locals: HashMap<String, Vec<Local<'d>>>,
    uses_old_self: bool,
}

/// Estimates `rule` evaluated with `self` (and `oldSelf`) of declaration `root`.
pub fn estimate(rule: &str, root: &Decl) -> Result<RuleCost, CostError> {
    let expr = kube_cel::cel::parser::Parser::new()
        .parse(rule)
        .map_err(|e| CostError::Compile(e.to_string()))?;
    let mut coster = Coster {
        root,
        paths: HashMap::new(),
        sizes: HashMap::new(),
        entry_sizes: HashMap::new(),
        types: HashMap::new(),
        locals: HashMap::new(),
        uses_old_self: false,
    };
    let cost = coster.cost(&expr)?;
    match coster.ty(&expr) {
        Ty::Bool | Ty::Dyn => {}
        _ => return Err(CostError::NotBool),
    }
    Ok(RuleCost {
        max_cost: cost.max,
        uses_old_self: coster.uses_old_self,
    })
}

const SELECT_AND_IDENT_COST: Estimate = Estimate::fixed(1);
const PRESENCE_TEST_COST: Estimate = Estimate::fixed(1);

impl<'d> Coster<'d> {
    fn ty(&self, e: &IdedExpr) -> Ty<'d> {
        self.types.get(&e.id).cloned().unwrap_or(Ty::Dyn)
    }

    fn set_ty(&mut self, e: &IdedExpr, ty: Ty<'d>) {
        self.types.insert(e.id, ty);
    }

    fn local(&self, name: &str) -> Option<&Local<'d>> {
        self.locals.get(name).and_then(|stack| stack.last())
    }

    fn path(&self, e: &IdedExpr) -> Vec<String> {
        if let Expr::Ident(name) = &e.expr
            && let Some(local) = self.local(name)
        {
            return local.path.clone();
        }
        self.paths.get(&e.id).cloned().unwrap_or_default()
    }

    fn cost(&mut self, e: &IdedExpr) -> Result<Estimate, CostError> {
        match &e.expr {
            Expr::Literal(literal) => {
                let ty = match literal {
                    LiteralValue::Boolean(_) => Ty::Bool,
                    LiteralValue::Bytes(_) => Ty::Bytes,
                    LiteralValue::Double(_) => Ty::Double,
                    LiteralValue::Int(_) => Ty::Int,
                    LiteralValue::Null => Ty::Null,
                    LiteralValue::String(_) => Ty::String,
                    LiteralValue::UInt(_) => Ty::Uint,
                };
                self.set_ty(e, ty);
                Ok(Estimate::default())
            }
            Expr::Ident(name) => Ok(self.cost_ident(e, name)),
            Expr::Select(select) => self.cost_select(e, select),
            Expr::Call(call) => self.cost_call(e, call),
            Expr::List(list) => {
                let mut sum = Estimate::default();
                let mut item_size = Estimate {
                    min: if list.elements.is_empty() {
                        0
                    } else {
                        u64::MAX
                    },
                    max: 0,
                };
                let mut item_ty = Ty::Dyn;
                for element in &list.elements {
                    sum = sum.add(self.cost(element)?);
                    item_size = item_size.union(self.size_or_unknown(element));
                    item_ty = item_ty.join(self.ty(element));
                }
                self.entry_sizes.insert(
                    e.id,
                    EntrySize {
                        is_list: true,
                        key: Estimate::fixed(1),
                        value: item_size,
                    },
                );
                self.set_ty(e, Ty::List(Box::new(item_ty)));
                Ok(sum.add(Estimate::fixed(LIST_CREATE_BASE_COST)))
            }
            Expr::Map(map) => {
                let mut sum = Estimate::default();
                let empty = if map.entries.is_empty() { 0 } else { u64::MAX };
                let mut key_size = Estimate { min: empty, max: 0 };
                let mut value_size = Estimate { min: empty, max: 0 };
                let (mut key_ty, mut value_ty) = (Ty::Dyn, Ty::Dyn);
                for entry in &map.entries {
                    let kube_cel::cel::common::ast::EntryExpr::MapEntry(entry) = &entry.expr else {
                        return Err(CostError::Compile("a struct field in a map literal".into()));
                    };
                    sum = sum
                        .add(self.cost(&entry.key)?)
                        .add(self.cost(&entry.value)?);
                    key_size = key_size.union(self.size_or_unknown(&entry.key));
                    value_size = value_size.union(self.size_or_unknown(&entry.value));
                    key_ty = key_ty.join(self.ty(&entry.key));
                    value_ty = value_ty.join(self.ty(&entry.value));
                }
                self.entry_sizes.insert(
                    e.id,
                    EntrySize {
                        is_list: false,
                        key: key_size,
                        value: value_size,
                    },
                );
                self.set_ty(e, Ty::Map(Box::new(key_ty), Box::new(value_ty)));
                Ok(sum.add(Estimate::fixed(MAP_CREATE_BASE_COST)))
            }
            Expr::Struct(structure) => {
                let mut sum = Estimate::default();
                for entry in &structure.entries {
                    if let kube_cel::cel::common::ast::EntryExpr::StructField(field) = &entry.expr {
                        sum = sum.add(self.cost(&field.value)?);
                    }
                }
                Ok(sum.add(Estimate::fixed(STRUCT_CREATE_BASE_COST)))
            }
            Expr::Comprehension(comprehension) => self.cost_comprehension(e, comprehension),
            Expr::Unspecified => Err(CostError::Compile("an empty expression".into())),
        }
    }

    fn cost_ident(&mut self, e: &IdedExpr, name: &str) -> Estimate {
        let ty = match self.local(name) {
            Some(local) => local.ty.clone(),
            None => {
                self.paths.insert(e.id, vec![name.to_owned()]);
                match name {
                    "self" => Ty::of(self.root),
                    "oldSelf" => {
                        self.uses_old_self = true;
                        Ty::of(self.root)
                    }
                    "apiVersion" | "apiGroup" | "kind" => Ty::String,
                    _ => Ty::Dyn,
                }
            }
        };
        self.set_ty(e, ty);
        SELECT_AND_IDENT_COST
    }

    fn cost_select(&mut self, e: &IdedExpr, select: &SelectExpr) -> Result<Estimate, CostError> {
        let operand_cost = self.cost(&select.operand)?;
        let operand_ty = self.ty(&select.operand);
        let field_ty = match &operand_ty {
            Ty::Object(decl) => {
                let DeclKind::Object(fields) = &decl.kind else {
                    unreachable!("Ty::Object holds object declarations")
                };
                match fields.get(&select.field) {
                    Some(field) => Ty::of(field),
                    None => {
                        return Err(CostError::Compile(format!(
                            "undefined field '{}'",
                            select.field
                        )));
                    }
                }
            }
            Ty::Map(_, value) => (**value).clone(),
            Ty::Dyn => Ty::Dyn,
            other => {
                return Err(CostError::Compile(format!(
                    "type '{other:?}' does not support field selection"
                )));
            }
        };
        if select.test {
            self.set_ty(e, Ty::Bool);
            return Ok(PRESENCE_TEST_COST.add(operand_cost));
        }
        let mut sum = operand_cost;
        if matches!(operand_ty, Ty::Map(..) | Ty::Object(_)) {
            sum = sum.add(SELECT_AND_IDENT_COST);
        }
        let mut path = self.path(&select.operand);
        path.push(select.field.clone());
        self.paths.insert(e.id, path);
        self.set_ty(e, field_ty);
        Ok(sum)
    }

    fn cost_comprehension(
        &mut self,
        e: &IdedExpr,
        c: &ComprehensionExpr,
    ) -> Result<Estimate, CostError> {
        let mut sum = self.cost(&c.iter_range)?;
        sum = sum.add(self.cost(&c.accu_init)?);
        let accu = Local {
            path: self.path(&c.accu_init),
            size: self.compute_size(&c.accu_init),
            entry: self.entry_size(&c.accu_init),
            ty: self.ty(&c.accu_init),
        };
        self.locals
            .entry(c.accu_var.clone())
            .or_default()
            .push(accu);

        let range_ty = self.ty(&c.iter_range);
        let entry = self.entry_size(&c.iter_range);
        let is_list = match entry {
            Some(entry) => entry.is_list,
            None => matches!(range_ty, Ty::List(_)),
        };
        let mut path = self.path(&c.iter_range);
        let (subpath, size, item_ty) = if is_list {
            let item = match &range_ty {
                Ty::List(item) => (**item).clone(),
                _ => Ty::Dyn,
            };
            ("@items", entry.map(|e| e.value), item)
        } else {
            let key = match &range_ty {
                Ty::Map(key, _) => (**key).clone(),
                _ => Ty::Dyn,
            };
            ("@keys", entry.map(|e| e.key), key)
        };
        path.push(subpath.to_owned());
        if c.iter_var2.is_some() {
            return Err(CostError::UnknownFunction(
                "two-variable comprehension".into(),
            ));
        }
        self.locals
            .entry(c.iter_var.clone())
            .or_default()
            .push(Local {
                path,
                size,
                entry: None,
                ty: item_ty,
            });

        let loop_cost = self.cost(&c.loop_cond)?;
        let step_cost = self.cost(&c.loop_step)?;
        self.pop_local(&c.iter_var);
        // A macro building a list (map, filter) has the element type its step gives.
        if matches!(c.accu_init.expr, Expr::List(_))
            && let Some(stack) = self.locals.get_mut(&c.accu_var)
            && let Some(accu) = stack.last_mut()
        {
            accu.ty = accu
                .ty
                .clone()
                .join(self.types.get(&c.loop_step.id).cloned().unwrap_or(Ty::Dyn));
        }
        sum = sum.add(self.cost(&c.result)?);
        self.pop_local(&c.accu_var);

        let range_count = self.size_or_unknown(&c.iter_range);
        sum = sum.add(range_count.multiply(step_cost.add(loop_cost)));
        match &c.accu_init.expr {
            Expr::Literal(_) => {
                if let Some(size) = self.compute_size(&c.accu_init) {
                    self.sizes.insert(e.id, size);
                }
            }
            Expr::List(_) | Expr::Map(_) => {
                self.sizes.insert(e.id, range_count);
                if let Some(step_entry) = self.entry_size(&c.loop_step) {
                    self.entry_sizes.insert(e.id, step_entry);
                }
            }
            _ => {}
        }
        let ty = self.ty(&c.result);
        self.set_ty(e, ty);
        Ok(sum)
    }

    /// cel-go's `computeEntrySize`: a container literal's entry sizes, or a variable's.
    fn entry_size(&self, e: &IdedExpr) -> Option<EntrySize> {
        if let Some(entry) = self.entry_sizes.get(&e.id) {
            return Some(*entry);
        }
        match &e.expr {
            Expr::Ident(name) => self.local(name).and_then(|l| l.entry),
            _ => None,
        }
    }

    fn pop_local(&mut self, name: &str) {
        if let Some(stack) = self.locals.get_mut(name) {
            stack.pop();
        }
    }

    fn cost_call(&mut self, e: &IdedExpr, call: &CallExpr) -> Result<Estimate, CostError> {
        if call.func_name == "dyn" && call.target.is_none() && call.args.len() == 1 {
            let arg = &call.args[0];
            let cost = self.cost(arg)?;
            if let Some(size) = self.compute_size(arg) {
                self.sizes.insert(e.id, size);
            }
            if let Some(entry) = self.entry_size(arg) {
                self.entry_sizes.insert(e.id, entry);
            }
            self.set_ty(e, Ty::Dyn);
            return Ok(Estimate::fixed(1).add(cost));
        }
        let mut arg_costs = Vec::with_capacity(call.args.len());
        for arg in &call.args {
            arg_costs.push(self.cost(arg)?);
        }
        let mut sum = Estimate::default();
        let target = match &call.target {
            Some(target) => {
                sum = sum.add(self.cost(target)?);
                Some(self.node(target))
            }
            None => None,
        };
        let args: Vec<Node<'d>> = call.args.iter().map(|a| self.node(a)).collect();
        let (overloads, result_ty) = resolve(&call.func_name, target.as_ref(), &args)?;

        let mut fn_cost = Estimate {
            min: u64::MAX,
            max: 0,
        };
        let mut result_size: Option<Estimate> = None;
        for overload in overloads {
            let estimate =
                self.function_cost(e, call, overload, target.as_ref(), &args, &arg_costs)?;
            fn_cost = fn_cost.union(estimate.cost);
            if let Some(size) = estimate.result_size {
                result_size = Some(result_size.map_or(size, |r| r.union(size)));
            }
            match overload {
                Overload::IndexList | Overload::IndexMap => {
                    if let Some(container) = call.args.first() {
                        result_size = self.entry_size(container).map(|entry| entry.value);
                        let mut path = self.path(container);
                        path.push(
                            if overload == Overload::IndexList {
                                "@items"
                            } else {
                                "@values"
                            }
                            .to_owned(),
                        );
                        self.paths.insert(e.id, path);
                    }
                }
                _ => {}
            }
            if result_size.is_none() {
                self.set_ty(e, result_ty.clone());
                result_size = self.compute_size(e);
            }
        }
        self.set_ty(e, result_ty);
        if let Some(size) = result_size {
            self.sizes.insert(e.id, size);
        }
        Ok(sum.add(fn_cost))
    }

    /// cel-go's `functionCost`, with the Kubernetes library's estimates taken first.
    fn function_cost(
        &mut self,
        e: &IdedExpr,
        call: &CallExpr,
        overload: Overload,
        target: Option<&Node<'d>>,
        args: &[Node<'d>],
        arg_costs: &[Estimate],
    ) -> Result<CallEstimate, CostError> {
        let arg_sum = arg_costs.iter().fold(Estimate::default(), |s, c| s.add(*c));
        if let Some(library) = self.library_call_cost(&call.func_name, target, args)? {
            return Ok(CallEstimate {
                cost: library.cost.add(arg_sum),
                result_size: library.result_size,
            });
        }
        let size = |n: &Node<'d>| n.size.unwrap_or(Estimate::UNKNOWN);
        Ok(match overload {
            Overload::StartsWith | Overload::EndsWith if args.len() == 1 => CallEstimate::cost(
                size(&args[0])
                    .by_factor(STRING_TRAVERSAL_COST_FACTOR)
                    .add(arg_sum),
            ),
            Overload::InList if args.len() == 2 => {
                CallEstimate::cost(size(&args[1]).by_factor(1.0).add(arg_sum))
            }
            Overload::MatchesString if target.is_some() && args.len() == 1 => {
                let str_cost = target
                    .map(size)
                    .unwrap_or(Estimate::UNKNOWN)
                    .add(Estimate::fixed(1))
                    .by_factor(STRING_TRAVERSAL_COST_FACTOR);
                let regex_cost = size(&args[0]).by_factor(REGEX_STRING_LENGTH_COST_FACTOR);
                CallEstimate::cost(str_cost.multiply(regex_cost).add(arg_sum))
            }
            Overload::ContainsString if target.is_some() && args.len() == 1 => {
                let str_cost = target
                    .map(size)
                    .unwrap_or(Estimate::UNKNOWN)
                    .by_factor(STRING_TRAVERSAL_COST_FACTOR);
                let sub_cost = size(&args[0]).by_factor(STRING_TRAVERSAL_COST_FACTOR);
                CallEstimate::cost(str_cost.multiply(sub_cost).add(arg_sum))
            }
            Overload::Logical => {
                let (lhs, rhs) = (arg_costs[0], arg_costs[1]);
                CallEstimate::cost(Estimate {
                    min: lhs.min,
                    max: lhs.add(rhs).max,
                })
            }
            Overload::Conditional => {
                let size = size(&args[1]).union(size(&args[2]));
                let entries = match (
                    self.entry_size(&call.args[1]),
                    self.entry_size(&call.args[2]),
                ) {
                    (Some(a), Some(b)) => Some(a.union(b)),
                    _ => None,
                };
                if let Some(entries) = entries {
                    self.entry_sizes.insert(e.id, entries);
                }
                CallEstimate {
                    cost: arg_costs[0].add(arg_costs[1].union(arg_costs[2])),
                    result_size: Some(size),
                }
            }
            Overload::AddString | Overload::AddList if args.len() == 2 => {
                let result = size(&args[0]).add(size(&args[1]));
                let entries = match (
                    self.entry_size(&call.args[0]),
                    self.entry_size(&call.args[1]),
                ) {
                    (Some(a), Some(b)) => Some(a.union(b)),
                    _ => None,
                };
                if let Some(entries) = entries {
                    self.entry_sizes.insert(e.id, entries);
                }
                let cost = if overload == Overload::AddList {
                    Estimate::fixed(1).add(arg_sum)
                } else {
                    result.by_factor(STRING_TRAVERSAL_COST_FACTOR).add(arg_sum)
                };
                CallEstimate {
                    cost,
                    result_size: Some(result),
                }
            }
            Overload::CompareSized => {
                let (lhs, rhs) = (size(&args[0]), size(&args[1]));
                let smallest_max = lhs.max.min(rhs.max);
                let min = u64::from(smallest_max > 0);
                CallEstimate::cost(
                    Estimate {
                        min,
                        max: smallest_max,
                    }
                    .by_factor(STRING_TRAVERSAL_COST_FACTOR)
                    .add(arg_sum),
                )
            }
            _ => CallEstimate::cost(Estimate::fixed(1).add(arg_sum)),
        })
    }

    /// The Kubernetes CEL library's estimates (by function name), or `None` to fall back to
    /// cel-go's.
    fn library_call_cost(
        &self,
        function: &str,
        target: Option<&Node<'d>>,
        args: &[Node<'d>],
    ) -> Result<Option<CallEstimate>, CostError> {
        let size = |n: &Node<'d>| self.library_size(n);
        let Some(target) = target else {
            return Ok(match function {
                "url" if args.len() == 1 => {
                    let sz = size(&args[0]);
                    Some(CallEstimate {
                        cost: sz.by_factor(STRING_TRAVERSAL_COST_FACTOR),
                        result_size: Some(sz),
                    })
                }
                _ => None,
            });
        };
        Ok(match function {
            "isSorted" | "sum" | "max" | "min" | "indexOf" | "lastIndexOf" => match &target.ty {
                Ty::List(item) => {
                    let mut element_cost = Estimate::fixed(1);
                    if matches!(**item, Ty::String | Ty::Bytes) {
                        let mut path = target.path.clone();
                        path.push("@items".into());
                        let item_size = self.estimate_size(&path).unwrap_or(Estimate::UNKNOWN);
                        element_cost =
                            element_cost.add(item_size.by_factor(STRING_TRAVERSAL_COST_FACTOR));
                    }
                    Some(CallEstimate::cost(size(target).multiply(element_cost)))
                }
                _ => Some(CallEstimate::cost(
                    size(target).by_factor(STRING_TRAVERSAL_COST_FACTOR),
                )),
            },
            "lowerAscii" | "upperAscii" | "substring" | "trim" => {
                let sz = size(target);
                Some(CallEstimate {
                    cost: sz.by_factor(STRING_TRAVERSAL_COST_FACTOR),
                    result_size: Some(sz),
                })
            }
            "split" => {
                let sz = size(target);
                let max = match args.get(1).and_then(|a| a.int_literal) {
                    Some(limit) => u64::try_from(limit).unwrap_or(u64::MAX),
                    None => sz.max,
                };
                Some(CallEstimate {
                    cost: sz.by_factor(2.0 * STRING_TRAVERSAL_COST_FACTOR),
                    result_size: Some(Estimate { min: 0, max }),
                })
            }
            "find" | "findAll" if !args.is_empty() => {
                let sz = size(target);
                let str_cost = sz
                    .add(Estimate::fixed(1))
                    .by_factor(STRING_TRAVERSAL_COST_FACTOR);
                let regex_cost = size(&args[0]).by_factor(REGEX_STRING_LENGTH_COST_FACTOR);
                Some(CallEstimate {
                    cost: str_cost.multiply(regex_cost),
                    result_size: Some(Estimate {
                        min: 0,
                        max: sz.max,
                    }),
                })
            }
            "join" => {
                let list_size = size(target);
                let mut sz = Estimate::default();
                if let Ty::List(_) = &target.ty {
                    let mut path = target.path.clone();
                    path.push("@items".into());
                    let item = self.estimate_size(&path).unwrap_or(Estimate::UNKNOWN);
                    sz = list_size.multiply(item);
                }
                if let Some(separator) = args.first() {
                    let separators = Estimate {
                        min: list_size.min.saturating_sub(1),
                        max: list_size.max.saturating_sub(1),
                    };
                    sz = sz.add(size(separator).multiply(separators));
                }
                Some(CallEstimate {
                    cost: sz.by_factor(STRING_TRAVERSAL_COST_FACTOR),
                    result_size: Some(sz),
                })
            }
            "replace" => return Err(CostError::UnknownFunction("replace".into())),
            _ => None,
        })
    }

    /// The Kubernetes library's size of an argument: computed, from the schema, or unknown.
    fn library_size(&self, node: &Node<'d>) -> Estimate {
        node.size
            .or_else(|| self.estimate_size(&node.path))
            .unwrap_or(Estimate::UNKNOWN)
    }

    fn node(&mut self, e: &IdedExpr) -> Node<'d> {
        let mut path = self.path(e);
        if path.first().is_some_and(|p| p == ACCUMULATOR) {
            path.clear();
        }
        let int_literal = match &e.expr {
            Expr::Literal(LiteralValue::Int(i)) => Some(**i),
            _ => None,
        };
        Node {
            path,
            ty: self.ty(e),
            size: self.compute_size(e),
            int_literal,
        }
    }

    fn size_or_unknown(&mut self, e: &IdedExpr) -> Estimate {
        self.compute_size(e).unwrap_or(Estimate::UNKNOWN)
    }

    /// cel-go's `computeSize`: known sizes, literals, the schema by path, scalars, then what a
    /// loop variable was bound with.
    fn compute_size(&mut self, e: &IdedExpr) -> Option<Estimate> {
        if let Some(size) = self.sizes.get(&e.id) {
            return Some(*size);
        }
        let literal = match &e.expr {
            Expr::Literal(LiteralValue::String(s)) => Some(s.chars().count() as u64),
            Expr::Literal(LiteralValue::Bytes(b)) => Some(b.len() as u64),
            Expr::Literal(
                LiteralValue::Boolean(_)
                | LiteralValue::Double(_)
                | LiteralValue::Int(_)
                | LiteralValue::UInt(_)
                | LiteralValue::Null,
            ) => Some(1),
            Expr::List(list) => Some(list.elements.len() as u64),
            Expr::Map(map) => Some(map.entries.len() as u64),
            _ => None,
        };
        if let Some(n) = literal {
            return Some(Estimate::fixed(n));
        }
        let path = self.path(e);
        if let Some(size) = self.estimate_size(&path) {
            self.sizes.insert(e.id, size);
            return Some(size);
        }
        if self.ty(e).is_scalar() {
            return Some(Estimate::fixed(1));
        }
        if let Expr::Ident(name) = &e.expr
            && let Some(local) = self.local(name)
        {
            return local.size;
        }
        None
    }

    /// kube-apiserver's size estimator: the schema node at `path` (its first element, the
    /// variable, is skipped, whatever it is).
    fn estimate_size(&self, path: &[String]) -> Option<Estimate> {
        if path.is_empty() {
            return None;
        }
        let mut node = self.root;
        for name in &path[1..] {
            node = match (name.as_str(), &node.kind) {
                ("@items" | "@values", DeclKind::List(item) | DeclKind::Map(_, item)) => item,
                ("@keys", DeclKind::Map(key, _)) => key,
                (field, DeclKind::Object(fields)) => fields.get(field)?,
                _ => return None,
            };
        }
        Some(Estimate {
            min: 0,
            max: node.max_elements,
        })
    }
}

/// Which cel-go overload a call resolves to, as far as costs differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Overload {
    /// Equality and ordering of strings or bytes: linear in the shorter side.
    CompareSized,
    StartsWith,
    EndsWith,
    ContainsString,
    MatchesString,
    InList,
    IndexList,
    IndexMap,
    AddString,
    AddList,
    Logical,
    Conditional,
    /// Everything priced at one plus the arguments.
    Constant,
}

/// The overloads a call may resolve to (several when an operand is `dyn`) and its result type.
fn resolve<'d>(
    function: &str,
    target: Option<&Node<'d>>,
    args: &[Node<'d>],
) -> Result<(Vec<Overload>, Ty<'d>), CostError> {
    use Overload as O;
    let arg = |i: usize| args.get(i).map(|a| a.ty.clone()).unwrap_or(Ty::Dyn);
    let target_ty = target.map(|t| t.ty.clone());
    let sized_or_not = |t: &Ty<'d>| match t {
        Ty::String | Ty::Bytes => vec![O::CompareSized],
        Ty::Dyn => vec![O::CompareSized, O::Constant],
        _ => vec![O::Constant],
    };
    let resolved = match (function, target_ty.as_ref()) {
        ("_==_" | "_!=_", None) => (vec![O::CompareSized], Ty::Bool),
        ("_<_" | "_<=_" | "_>_" | "_>=_", None) => (sized_or_not(&arg(0)), Ty::Bool),
        ("_&&_" | "_||_", None) => (vec![O::Logical], Ty::Bool),
        ("!_" | "@not_strictly_false", None) => (vec![O::Constant], Ty::Bool),
        ("_?_:_", None) => (vec![O::Conditional], arg(1).join(arg(2))),
        ("@in", None) => {
            let overloads = match arg(1) {
                Ty::List(_) => vec![O::InList],
                Ty::Map(..) => vec![O::Constant],
                _ => vec![O::InList, O::Constant],
            };
            (overloads, Ty::Bool)
        }
        ("_[_]", None) => match arg(0) {
            Ty::List(item) => (vec![O::IndexList], *item),
            Ty::Map(_, value) => (vec![O::IndexMap], *value),
            _ => (vec![O::IndexList, O::IndexMap], Ty::Dyn),
        },
        ("_+_", None) => match arg(0) {
            Ty::String => (vec![O::AddString], Ty::String),
            Ty::Bytes => (vec![O::AddString], Ty::Bytes),
            Ty::List(a) => {
                let b = match arg(1) {
                    Ty::List(b) => *b,
                    _ => Ty::Dyn,
                };
                (vec![O::AddList], Ty::List(Box::new(a.join(b))))
            }
            Ty::Dyn => (vec![O::AddString, O::AddList, O::Constant], Ty::Dyn),
            numeric => (vec![O::Constant], numeric),
        },
        ("_-_" | "_*_" | "_/_" | "_%_", None) | ("-_", None) => (vec![O::Constant], arg(0)),
        ("size", _) => (vec![O::Constant], Ty::Int),
        ("int", None) => (vec![O::Constant], Ty::Int),
        ("uint", None) => (vec![O::Constant], Ty::Uint),
        ("double", None) => (vec![O::Constant], Ty::Double),
        ("string", None) => (vec![O::Constant], Ty::String),
        ("bytes", None) => (vec![O::Constant], Ty::Bytes),
        ("bool", None) => (vec![O::Constant], Ty::Bool),
        ("duration", None) => (vec![O::Constant], Ty::Duration),
        ("timestamp", None) => (vec![O::Constant], Ty::Timestamp),
        ("type", None) => (vec![O::Constant], Ty::Dyn),
        ("matches", Some(_)) => (vec![O::MatchesString], Ty::Bool),
        ("matches", None) => (vec![O::Constant], Ty::Bool),
        ("startsWith", Some(_)) => (vec![O::StartsWith], Ty::Bool),
        ("endsWith", Some(_)) => (vec![O::EndsWith], Ty::Bool),
        ("contains", Some(_)) => (vec![O::ContainsString], Ty::Bool),
        ("find", Some(_)) => (vec![O::Constant], Ty::String),
        ("findAll", Some(_)) => (vec![O::Constant], Ty::List(Box::new(Ty::String))),
        ("split", Some(_)) => (vec![O::Constant], Ty::List(Box::new(Ty::String))),
        ("lowerAscii" | "upperAscii" | "trim" | "substring" | "join", Some(_)) => {
            (vec![O::Constant], Ty::String)
        }
        ("indexOf" | "lastIndexOf", Some(_)) => (vec![O::Constant], Ty::Int),
        ("isSorted", Some(_)) => (vec![O::Constant], Ty::Bool),
        ("sum" | "min" | "max", Some(Ty::List(item))) => (vec![O::Constant], (**item).clone()),
        _ => return Err(CostError::UnknownFunction(function.to_owned())),
    };
    Ok(resolved)
}

#[cfg(test)]
mod tests {
    use super::super::decl::schema_decl;
    use super::*;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps;
    use serde_json::json;

    fn cost(rule: &str, schema: serde_json::Value) -> u64 {
        let schema: JSONSchemaProps = serde_json::from_value(schema).expect("a schema");
        let decl = schema_decl(&schema, false).expect("a declaration");
        estimate(rule, &decl).expect("an estimate").max_cost
    }

    #[test]
    fn scalar_comparisons_cost_a_few_units() {
        let key = json!({"type": "string"});
        // self (1) + equality over min(|self|, 22) bytes at 0.1 (3).
        assert_eq!(cost("self != 'kubernetes.io/hostname'", key.clone()), 4);
        let int = json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}});
        // Two selections (2 each); integers have no size, so comparing them is free.
        assert_eq!(cost("self.a > self.b", int), 5);
    }

    #[test]
    fn regexes_cost_string_length_times_pattern_length() {
        let bounded = json!({"type": "string", "maxLength": 316});
        // find: (1264 + 1) * 0.1 = 127 times 8 * 0.25 = 2; endsWith: 12 * 0.1 = 2; self 1.
        assert_eq!(
            cost("self.find('^([^/]+)').endsWith('karpenter.sh')", bounded),
            257
        );
        let unbounded = json!({"type": "string"});
        assert!(cost("self.find('^([^/]+)').endsWith('karpenter.sh')", unbounded) > 600_000);
    }

    #[test]
    fn comprehensions_multiply_by_the_range() {
        let list =
            json!({"type": "array", "maxItems": 10, "items": {"type": "string", "maxLength": 5}});
        // range self (1) + accu init (0) + result (1) + 10 * (step: @result && (x != 'a') = 1 + 1 + 1,
        // condition: @not_strictly_false(@result) = 2).
        assert_eq!(cost("self.all(x, x != 'a')", list), 52);
    }

    #[test]
    fn unknown_fields_and_non_boolean_rules_do_not_compile() {
        let schema: JSONSchemaProps = serde_json::from_value(
            json!({"type": "object", "properties": {"a": {"type": "string"}}}),
        )
        .expect("a schema");
        let decl = schema_decl(&schema, false).expect("a declaration");
        assert!(matches!(
            estimate("self.b == 'x'", &decl),
            Err(CostError::Compile(_))
        ));
        assert_eq!(estimate("self.a", &decl), Err(CostError::NotBool));
        assert!(
            estimate("self.a == oldSelf.a", &decl)
                .expect("ok")
                .uses_old_self
        );
    }
}
